"""Tests of kdissect/records/ (tests mirror the package)."""
