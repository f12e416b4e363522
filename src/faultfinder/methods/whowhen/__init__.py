"""The Who&When baselines (all-at-once, step-by-step, binary search, hybrid) and the
prompts and settings they share (``common``)."""
