from setuptools import find_packages, setup

package_name = "rpent_hw"

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
    description="Real-arm robot nodes (Franka via franky, SO-101 via LeRobot) implementing the RPent robot contract.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "franka_node = rpent_hw.franka.node:main",
            "so101_node = rpent_hw.so101.node:main",
        ],
    },
)
