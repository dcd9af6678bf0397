"""What tests and benchmarks stand in for: servers that speak the LLM providers' wire
(``provider_wire``) and a tiny LeRobot policy with random weights (``tiny_act``). No product
package imports it (tests/test_architecture.py), so a robot host can leave it out."""
