"""Tests of kdissect/forensics/ (tests mirror the package)."""
