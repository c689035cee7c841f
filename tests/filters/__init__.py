"""Tests of kdissect/filters/ (tests mirror the package)."""
