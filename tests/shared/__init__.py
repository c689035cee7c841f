"""Tests of kdissect/shared/ (tests mirror the package)."""
