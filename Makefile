# Entry points; see README.md.
.PHONY: setup test test-fast bench shell clean

setup:
	scripts/setup.sh

test: setup
	scripts/run_tests.sh

test-fast: setup
	scripts/run_tests.sh -m "not slow"

clean:
	rm -rf ros_ws/build ros_ws/install ros_ws/log .venv
