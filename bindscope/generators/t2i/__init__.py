"""Text-to-image prompt-order experiments (the ComCO paper's practical-impact experiment): prompts of 2-5 objects in
controlled orders, rendered by any diffusers text-to-image pipeline into a bindscope dataset. Public call:
:func:`bindscope.generators.t2i.api.t2i` (``bindscope.comco.t2i``); scoring: :func:`bindscope.evaluation.t2i.t2i_score`
(``bindscope.t2i_score``)."""
