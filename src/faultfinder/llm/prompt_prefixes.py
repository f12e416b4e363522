"""Prefix boundaries learned from the prompts a backend has sent, for APIs whose prompt
cache serves only prefixes the request marks (Anthropic's ``cache_control``).

Methods lay their prompts out so that the calls of a case share a long prefix (ECHO's
``shared-prefix`` and CHIEF's layouts: the case and the conversation first, the call's
own question last) but send each user message as one text, so where the shared part ends
is not written anywhere. A server with automatic prefix caching finds it by itself; an
API with explicit marks needs it named. :class:`PrefixMemory` finds it the same way the
automatic caches do, from the prompts seen: the longest prefix (cut at a line end) that
a user text shares with an earlier one sent after the same context (tools, system prompt
and earlier turns) becomes a boundary, and every later text that starts with a known
boundary is cut there, so the backend can mark it. The first call of a case cannot know
its boundary; from the second on, the shared part is written once and read after.
"""

from __future__ import annotations

from collections import OrderedDict, deque

MIN_CHARS = 4096
"""Shortest shared prefix worth a boundary (~1,024 tokens, the smallest of the minimums
the API's models cache; shorter marks would cost nothing but change nothing)."""


def shared_line_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` that ends a line (0: none)."""
    limit = min(len(a), len(b))
    n = 0
    step = 4096
    while n < limit:  # compare in slices: C speed for long prompts
        end = min(n + step, limit)
        if a[n:end] == b[n:end]:
            n = end
            continue
        while n < end and a[n] == b[n]:
            n += 1
        break
    cut = a.rfind("\n", 0, n)
    return cut + 1 if cut >= 0 else 0


class PrefixMemory:
    """Recent user texts and the boundaries learned from them, per context."""

    def __init__(self, keep: int = 32, contexts: int = 256, min_chars: int = MIN_CHARS) -> None:
        self.keep = keep
        """Texts (and boundaries) remembered per context, newest first."""
        self.contexts = contexts
        """Contexts remembered, the least recently used forgotten first."""
        self.min_chars = min_chars
        self._memory: OrderedDict[str, tuple[deque[str], deque[str]]] = OrderedDict()

    def cuts(self, context: str, text: str, limit: int = 2) -> list[int]:
        """Where to cut ``text`` (ascending, at most ``limit``; the longest known
        boundaries it starts with), after learning from it."""
        if context in self._memory:
            self._memory.move_to_end(context)
        else:
            self._memory[context] = (deque(maxlen=self.keep), deque(maxlen=self.keep))
            while len(self._memory) > self.contexts:
                self._memory.popitem(last=False)
        texts, bounds = self._memory[context]
        for earlier in texts:
            n = shared_line_prefix(text, earlier)
            if n >= self.min_chars and n < len(text) and text[:n] not in bounds:
                bounds.appendleft(text[:n])
        texts.appendleft(text)
        found = sorted({len(b) for b in bounds if len(b) < len(text) and text.startswith(b)})
        return found[-limit:]
