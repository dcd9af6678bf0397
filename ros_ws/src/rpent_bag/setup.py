from setuptools import find_packages, setup

package_name = "rpent_bag"

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
    description="Record the robot contract to rosbag2 (MCAP), replay a run, export camera video.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "recorder = rpent_bag.record_node:main",
            "replay = rpent_bag.replay:main",
            "export_video = rpent_bag.video:main",
        ],
    },
)
