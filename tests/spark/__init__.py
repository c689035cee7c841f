"""Tests of kdissect/spark/ (tests mirror the package)."""
