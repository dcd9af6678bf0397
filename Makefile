# Entry points; see README.md.
.PHONY: setup setup-all run test test-fast test-all clean

# The main job: a LIBERO task end to end, headless (extra arguments: make run ARGS="task_id:=3")
run: setup
	scripts/run.sh libero_sim $(ARGS)

# What the main job needs (no torch, no arm SDKs)
setup:
	scripts/setup.sh

# Every optional part too: action-model backends, both arms, the test tools
setup-all:
	scripts/setup.sh --all

# CI: every behaviour, one whole episode per path (see README, "Tests")
test: setup-all
	scripts/run_tests.sh -m "not matrix"

# No simulated episode
test-fast: setup-all
	scripts/run_tests.sh -m "not slow"

# The full matrix: every provider's whole episode too
test-all: setup-all
	scripts/run_tests.sh

clean:
	rm -rf ros_ws/build ros_ws/install ros_ws/log .venv
