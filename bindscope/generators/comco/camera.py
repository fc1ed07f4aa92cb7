"""Camera geometry of ComCO / SimCO scene specs: bounding cubes, projection, framing and zoom (pure Python +
numpy, never imports bpy).

World frame (Blender's): metres, z up, the ground is z = 0. The camera sits on the -y side (azimuth 0),
``camera.elevation_deg`` above the ground; objects face -y (towards the camera) before their yaw jitter.
Projection: a pinhole with a 36 mm sensor (horizontal fit) and Blender's lens shift (:func:`project`).

A spec camera is the dict of :func:`frame_camera`: ``elevation_deg``, ``azimuth_deg`` (degrees), ``focal_mm``,
``look_at`` (metres), ``distance`` (metres from ``look_at``) and the lens shift ``shift_x``, ``shift_y`` (image
widths). The renderer builds Blender's camera from it; :func:`project` predicts where a point lands in the image.
"""

from __future__ import annotations

import math

import numpy as np

SENSOR_WIDTH_MM = 36.0
"""Camera sensor width (Blender's default); with ``focal_mm`` 50 the horizontal field of view is 39.6 degrees."""


def object_corners(entry: dict) -> np.ndarray:
    """The 8 corners (8, 3) in metres of an object's bounding box in the world: the 1 m cube that holds every
    normalised model (x, y in -0.5..0.5, z in 0..1) scaled, yawed and moved as the spec ``entry`` says."""
    unit = np.array([[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (0.0, 1.0)])
    yaw = math.radians(entry["yaw_deg"])
    rot = np.array([[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]])
    return unit * entry["scale"] @ rot.T + np.array([entry["x"], entry["y"], 0.0])


def view_direction(elevation_deg: float, azimuth_deg: float) -> np.ndarray:
    """Unit vector towards a viewer at ``elevation_deg`` above the ground, ``azimuth_deg`` from -y towards +x."""
    el, az = math.radians(elevation_deg), math.radians(azimuth_deg)
    return np.array([math.sin(az) * math.cos(el), -math.cos(az) * math.cos(el), math.sin(el)])


def _camera_frame(camera: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Position, right, up and forward unit vectors of a spec camera (Blender: -Z looks at ``look_at``, Y up)."""
    towards = view_direction(camera["elevation_deg"], camera["azimuth_deg"])
    position = np.asarray(camera["look_at"], float) + camera["distance"] * towards
    forward = -towards
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    return position, right, np.cross(right, forward), forward


def image_plane(camera: dict, points: np.ndarray) -> np.ndarray:
    """Points (N, 3) in metres -> (N, 2) image-plane coordinates ``(u, v)`` in units of the image width,
    u right and v up from the optical axis, before the lens shift (36 mm sensor width, horizontal fit).

    Raises:
        ValueError: a point lies behind the camera or in front of its 0.1 m clip plane.
    """
    position, right, up, forward = _camera_frame(camera)
    rel = np.asarray(points, float) - position
    depth = rel @ forward
    if depth.min() <= 0.1:
        raise ValueError("a point lies behind the camera's clip plane")
    scale = camera["focal_mm"] / SENSOR_WIDTH_MM / depth
    return np.c_[(rel @ right) * scale, (rel @ up) * scale]


def project(camera: dict, points: np.ndarray, resolution: int) -> np.ndarray:
    """Points (N, 3) in metres -> (N, 2) pixel coordinates ``(x, y)`` (x right, y down, (0, 0) the top-left
    image corner) of a square ``resolution`` image seen by the spec ``camera`` (lens shift included); the
    same mapping as Blender's camera with ``sensor_fit = "HORIZONTAL"``."""
    uv = image_plane(camera, points)
    return np.c_[(0.5 + uv[:, 0] - camera["shift_x"]) * resolution,
                 (0.5 - uv[:, 1] + camera["shift_y"]) * resolution]


def projected_boxes(spec: dict) -> list[tuple[float, float, float, float]]:
    """Pixel bbox ``(x0, y0, x1, y1)`` of each spec object's bounding cube (:func:`object_corners`) in its
    image: it holds the object's projected mesh, so every visible pixel lies inside it."""
    res = spec["render"]["resolution"]
    boxes = []
    for entry in spec["objects"]:
        xy = project(spec["camera"], object_corners(entry), res)
        boxes.append((float(xy[:, 0].min()), float(xy[:, 1].min()), float(xy[:, 0].max()), float(xy[:, 1].max())))
    return boxes


def frame_camera(points: np.ndarray, elevation_deg: float, azimuth_deg: float, focal_mm: float, fill: float,
                 centre_x: float | None = None) -> dict:
    """A camera that frames ``points`` (N, 3 metres): the spec ``camera`` dict.

    The camera looks from ``elevation_deg`` / ``azimuth_deg`` at the centre of the points' bounding box (x =
    ``centre_x`` when given); its distance is found by bisection so that the points' projected extent is
    ``fill`` of the image side along its larger image axis (or the camera stands just outside the points when
    they fill less even there), and the lens shift (``shift_x``, ``shift_y``, in image widths, Blender's
    camera shift) centres that extent in the image. With ``centre_x`` the horizontal shift is 0 and the fit is
    symmetric about that x, so an object there stands in the middle of the image.
    """
    lo_corner, hi_corner = points.min(axis=0), points.max(axis=0)
    look_at = (lo_corner + hi_corner) / 2
    if centre_x is not None:
        look_at[0] = centre_x
    camera = {"elevation_deg": float(elevation_deg), "azimuth_deg": float(azimuth_deg), "focal_mm": float(focal_mm),
              "look_at": [float(v) for v in look_at], "distance": 0.0, "shift_x": 0.0, "shift_y": 0.0}

    def extent(distance: float) -> tuple[float, np.ndarray]:
        uv = image_plane({**camera, "distance": distance}, points)
        width = 2 * np.abs(uv[:, 0]).max() if centre_x is not None else np.ptp(uv[:, 0])
        return max(width, np.ptp(uv[:, 1])), uv

    near = float(np.linalg.norm(points - look_at, axis=1).max()) + 0.2
    far = near * 1000.0
    if extent(near)[0] > fill:
        for _ in range(60):
            mid = (near + far) / 2
            near, far = (mid, far) if extent(mid)[0] > fill else (near, mid)
        near = far
    _, uv = extent(near)
    camera["distance"] = float(near)
    camera["shift_x"] = 0.0 if centre_x is not None else float((uv[:, 0].min() + uv[:, 0].max()) / 2)
    camera["shift_y"] = float((uv[:, 1].min() + uv[:, 1].max()) / 2)
    return camera


def zoom_to_box(camera: dict, box: tuple[int, int, int, int], resolution: int, fill: float) -> dict:
    """The camera zoomed (focal length) and shifted so that the pixel box ``(x0, y0, x1, y1)`` (half-open) of
    its image becomes centred with its larger side ``fill`` of the image side. Zoom and lens shift map the image
    plane linearly, so the box lands there exactly (to pixel rounding)."""
    x0, y0, x1, y1 = box
    k = fill * resolution / max(x1 - x0, y1 - y0)
    u = (x0 + x1) / 2 / resolution - 0.5 + camera["shift_x"]
    v = 0.5 - (y0 + y1) / 2 / resolution + camera["shift_y"]
    return {**camera, "focal_mm": camera["focal_mm"] * k, "shift_x": u * k, "shift_y": v * k}
