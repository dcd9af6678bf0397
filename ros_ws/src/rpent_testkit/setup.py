from setuptools import find_packages, setup

package_name = "rpent_testkit"

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
    description="Stand-ins for tests and benchmarks: LLM provider wire servers, a tiny LeRobot "
                "policy. Not needed on a robot host.",
    license="Apache-2.0",
)
