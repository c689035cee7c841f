"""Checks over the whole package: layers, types, the compiled build, the wheel, the notebooks."""
