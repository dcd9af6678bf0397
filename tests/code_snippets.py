"""Code-as-policy snippets the tests send, as a model would write them."""

# What a model might write: find the objects, then a top-down pick and place, every move
# checked, in a loop over the plan's waypoints.
PICK_AND_PLACE_SNIPPET = """
poses = robo.get_object_poses().data["poses"]
soup = np.array(poses["alphabet_soup_1"][0])
basket = np.array(poses["basket_1"][0])
plan = [("move", soup + [0, 0, 0.12], 0.01), ("open", None, 0), ("move", soup, 0.008),
        ("close", None, 0), ("lift", 0.20, 0.02), ("move", basket + [0, 0, 0.20], 0.02),
        ("move", basket + [0, 0, 0.12], 0.02), ("open", None, 0), ("lift", 0.10, 0.02)]
here = None
for kind, target, tolerance in plan:
    if kind in ("open", "close"):
        result = robo.gripper(action=kind)
        here = np.array(robo.observe().data["position"])
        continue
    if kind == "lift":
        target = here + [0, 0, target]
    result = robo.move_to(x=float(target[0]), y=float(target[1]), z=float(target[2]),
                          tolerance=tolerance)
    here = np.array(result.data["position"])
    print(kind, result.ok)
"""
