"""Attribution methods, one module or package each, listed in ``faultfinder.registry``.

The interface they follow and the machinery they share (rendering, answer parsing,
prompt fitting) live in ``faultfinder.judging``.
"""
