from setuptools import find_packages, setup

package_name = "rpent_common"

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
    description="Plain-Python helpers the RPent packages share that are not the robot "
                "contract: child processes, free ports, JSON over HTTP.",
    license="Apache-2.0",
)
