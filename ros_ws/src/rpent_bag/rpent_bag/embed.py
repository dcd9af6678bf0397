"""Robot descriptions a viewer can draw from a bag alone. No ROS.

A robot publishes ``robot_description`` with its meshes as ``file://`` URIs, which a
browser (Lichtblick or Foxglove on the web) cannot open, and which name files of the machine
that recorded. :func:`embed_meshes` puts each such mesh into the URDF as a ``data:`` URI
with its media type: a 3D panel fetches it like any URL and loads it by that type, so a bag
played back anywhere shows the arm. Self-contained formats only come out whole (STL, GLB):
a Collada or OBJ mesh's textures and materials are named relative to the mesh, which a
``data:`` URI has no folder for.
"""
from __future__ import annotations

import base64
import html
import os
import re
from typing import Callable, Optional
from urllib.parse import unquote, urlsplit

DESCRIPTION_TYPE = "std_msgs/msg/String"
# ``filename="file://..."`` in a URDF: the attribute, its quote and the URI.
FILE_URI = re.compile(r"""(\bfilename\s*=\s*)(["'])(file://[^"']*)\2""")
MEDIA_TYPES = {".stl": "model/stl", ".glb": "model/gltf-binary", ".gltf": "model/gltf+json",
               ".dae": "model/vnd.collada+xml", ".obj": "model/obj"}


def is_description(topic: str, type_name: str) -> bool:
    """A robot description: a std_msgs/String topic named robot_description (namespaced or
    not)."""
    return type_name == DESCRIPTION_TYPE and topic.rsplit("/", 1)[-1] == "robot_description"


def local_path(uri: str) -> Optional[str]:
    """The path on this machine a ``file://`` URI names; None for another machine's."""
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        return None
    return unquote(parts.path)


def embed_meshes(urdf: str, warn: Callable[[str], None]) -> str:
    """``urdf`` with every local ``file://`` mesh it names as a ``data:`` URI. A file that
    cannot be read, or of a type a viewer does not load, is left as it is, and ``warn``
    says so."""
    def embed(match) -> str:
        uri = html.unescape(match.group(3))
        path = local_path(uri)
        media = MEDIA_TYPES.get(os.path.splitext(path or "")[1].lower())
        if path is None or media is None:
            warn(f"{uri} left as it is: only local {', '.join(MEDIA_TYPES)} meshes are "
                 "embedded")
            return match.group(0)
        try:
            with open(path, "rb") as f:
                data = base64.b64encode(f.read()).decode()
        except OSError as err:
            warn(f"{uri} left as it is: cannot read it ({err.strerror}); a viewer of the bag "
                 "shows that link without its mesh")
            return match.group(0)
        quote = match.group(2)
        return f"{match.group(1)}{quote}data:{media};base64,{data}{quote}"

    return FILE_URI.sub(embed, urdf)
