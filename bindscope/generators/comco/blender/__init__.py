"""Blender execution of ComCO / SimCO scene specs: the only package of bindscope that uses ``bpy``, ``bmesh``
and ``mathutils``, all imported through :mod:`~bindscope.generators.comco.blender.runtime`
(:mod:`.models` builds the object models, :mod:`.importer` imports real 3D models for ``comco assets``).

:class:`~bindscope.generators.comco.blender.session.BlenderSession` keeps one Blender session alive in a
process and renders many scene specs (``scene.plan_scene`` / ``plan_reference``) with Cycles: an RGB
image, an exact instance-id mask from a flat 1-sample emission render, and per-object visible / unoccluded
pixel counts, in two explicit steps (``measure`` a layout, then ``complete`` it once the caller accepts it).
:func:`~bindscope.generators.comco.blender.session.get_session` returns the process's session.
"""
