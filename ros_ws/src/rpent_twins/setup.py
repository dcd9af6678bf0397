from setuptools import find_packages, setup

package_name = "rpent_twins"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
    ],
    package_data={package_name: ["scenes/*.yaml"]},
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="RPent maintainers",
    maintainer_email="maintainers@rpent.dev",
    description="The arms' simulated twins, behind the wire their drivers speak: franky-sim "
                "(an FR3 behind the libfranka protocol) and the SO-101's Feetech servo bus "
                "on a pty. Not needed on a robot host.",
    license="Apache-2.0",
    entry_points={"console_scripts": [
        "franky_sim = rpent_twins.franky_sim:main",
        "so101_twin = rpent_twins.so101_twin:main",
        "camera_node = rpent_twins.camera_node:main",
        "operator_node = rpent_twins.operator_node:main",
    ]},
)
