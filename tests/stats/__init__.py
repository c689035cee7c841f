"""Tests of kdissect/stats/ (tests mirror the package)."""
