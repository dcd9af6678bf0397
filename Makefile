# Entry points; see README.md.
.PHONY: setup setup-all run test test-fast clean

# The main job: a LIBERO task end to end, headless (extra arguments: make run ARGS="task_id:=3")
run: setup
	scripts/run.sh libero_sim $(ARGS)

# What the main job needs (no torch, no arm SDKs)
setup:
	scripts/setup.sh

# Every optional part too: action-model backends, both arms, the test tools
setup-all:
	scripts/setup.sh --all

test: setup-all
	scripts/run_tests.sh

test-fast: setup-all
	scripts/run_tests.sh -m "not slow"

clean:
	rm -rf ros_ws/build ros_ws/install ros_ws/log .venv
