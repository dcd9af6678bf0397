from setuptools import find_packages, setup

package_name = "rpent_perception"

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
    description="Perception for the agent: text-prompted segmentation and 3D object location "
                "from depth, camera_info and tf.",
    license="Apache-2.0",
    entry_points={
        "console_scripts": ["perception_node = rpent_perception.perception_node:main"],
    },
)
