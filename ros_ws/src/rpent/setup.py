from glob import glob

from setuptools import setup

package_name = "rpent"

# launch/ and config/ are symlinks to the repository's top-level folders, so the same
# files serve `ros2 launch rpent ...` and a checkout without ROS.
setup(
    name=package_name,
    version="0.1.0",
    packages=["rpent", "rpent.eval"],
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.launch.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml") + glob("config/*.json")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="RPent maintainers",
    maintainer_email="maintainers@rpent.dev",
    description="Bring-up for RPent: launch files, configuration and the rpent command.",
    license="Apache-2.0",
    # No setup.cfg script_dir: `rpent` lands in install/rpent/bin, which sourcing the
    # workspace puts on PATH (the node executables of the other packages go to lib/).
    entry_points={"console_scripts": ["rpent = rpent.cli:main"]},
)
