"""Tests of kdissect/report/ (tests mirror the package)."""
