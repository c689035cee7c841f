"""Tests of kdissect/commands/ (tests mirror the package)."""
