"""Blender execution of ComCO / SimCO scene specs (imports ``bpy``; nothing else in bindscope does).

:class:`~bindscope.generators.comco.blender.session.BlenderSession` keeps one Blender session alive in a
process and renders many scene specs (``planning.plan_scene`` / ``plan_reference``) with Cycles: an RGB
image, an exact instance-id mask from a flat 1-sample emission render, and per-object visible / unoccluded
pixel counts. :func:`~bindscope.generators.comco.blender.session.get_session` returns the process's session.
"""
