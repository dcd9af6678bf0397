from setuptools import find_packages, setup

package_name = "rpent_agent"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="RPent maintainers",
    maintainer_email="maintainers@rpent.dev",
    description="The agent node: an LLM (or scripted planner) drives the robot through tools over the robot contract.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "agent_node = rpent_agent.agent_node:main",
        ],
    },
)
