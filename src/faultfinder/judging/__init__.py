"""What every attribution method shares: the method interface and its result
(``method``), log rendering (``render``), prompt fitting (``fitting``), answer parsing
(``answers``, ``grammars``, ``structured``), the agent/step rule (``pairing``) and the
reference-answer lookup (``reference``)."""
