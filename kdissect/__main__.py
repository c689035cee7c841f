from kdissect.cli import entry

entry()
