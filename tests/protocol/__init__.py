"""Tests of kdissect/protocol/ (tests mirror the package)."""
