"""Tests of ``lakefuse.cli``: the ``lakefuse`` command line."""
