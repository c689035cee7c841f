"""Tests of kdissect/wire/ (tests mirror the package)."""
