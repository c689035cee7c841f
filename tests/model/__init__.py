"""Tests of kdissect/model/ (tests mirror the package)."""
