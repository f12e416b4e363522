"""Replies as models write them, each with the reading the parsers must give.

One module per parser; each has ``ROWS`` (at least 60) of ``(reply, expected, note)``,
``expected`` None meaning "unreadable: re-ask, then unparsed". The tables are plain data
so other tests (end to end, oracle) can reuse them: ``from parser_tables import yes_no``.
"""
