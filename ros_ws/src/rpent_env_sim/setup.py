from setuptools import find_packages, setup

package_name = "rpent_env_sim"

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
    description="Simulated robot nodes implementing the RPent robot contract (LIBERO / LIBERO-PRO / LIBERO-Plus).",
    license="Apache-2.0",
    entry_points={
        "console_scripts": ["libero_node = rpent_env_sim.libero_node:main"],
    },
)
