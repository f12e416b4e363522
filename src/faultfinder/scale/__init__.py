"""Running evaluations and DoVer replays on a Ray cluster (the optional ``[ray]`` extra).

Nothing here is imported unless ``--executor ray`` is asked for. The driver (the process
the user started) stays the single writer of every results file; workers hold the LLM
client and its cache, and one actor holds the run's budget and request rate.
"""
