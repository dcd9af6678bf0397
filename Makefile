# Entry points; see README.md.
.PHONY: setup run test test-fast clean

# The main job: a LIBERO task end to end, headless (extra arguments: make run ARGS="task_id:=3")
run: setup
	scripts/run.sh libero_sim $(ARGS)

setup:
	scripts/setup.sh

test: setup
	scripts/run_tests.sh

test-fast: setup
	scripts/run_tests.sh -m "not slow"

clean:
	rm -rf ros_ws/build ros_ws/install ros_ws/log .venv
