"""The five seeds' distributed utilities under their own names and signatures, on jobkit.

Porting a framework's code is one import line::

    from jobkit.compat import composer as dist          # was: from composer.utils import dist
    from jobkit.compat.olmo_core import get_rank, barrier  # was: from olmo_core.distributed.utils import ...

Each module keeps its seed's names, defaults and calling conventions, and does what jobkit does
underneath: identity from PMIx (never guessed from environment variables), collectives with
deadlines that name a rank that died. Where a seed's semantics is unsafe, the docstring of the
function says what jobkit does instead.

- ``jobkit.compat.axolotl``: axolotl's ``utils.distributed``
- ``jobkit.compat.composer``: composer's ``composer.utils.dist``
- ``jobkit.compat.modelopt``: ModelOpt's ``torch.export.distribute`` helpers
- ``jobkit.compat.olmo_core``: OLMo-core's ``olmo_core.distributed.utils``
- ``jobkit.compat.speechbrain``: SpeechBrain's ``speechbrain.utils.distributed``
"""
