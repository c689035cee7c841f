# The two entry points a newcomer needs; both set everything up first.
.PHONY: setup report test

setup:
	bash tools/setup.sh

# The main job: the Spark report, in local mode, over the bundled captures.
report: setup
	.venv/bin/kdissect spark captures -o report --overwrite

test: setup
	.venv/bin/python -m pytest
