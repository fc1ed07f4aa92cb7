"""Run one bindscope command that pauses inside its output claim, for the signal tests of tests/test_output_claim.py.

    python tests/claim_writer.py PAUSE GROUP ARG...

PAUSE is where the command stops (it prints ``paused`` and sleeps until a signal ends it):

- ``claimed``: right after the claim on its folder is entered (the folder is locked and marked, nothing else
  written), as at the first instruction of the ``with`` block (a signal there leaves the claim through its
  ``__exit__``);
- ``staging``: after the staging folder is made and a first file written into it;
- ``file``: halfway through the atomic write of an output file (its temporary file holds a first byte).

GROUP is ``madman``, ``comco`` or ``bindscope``; the ARGs are the command's.
"""

from __future__ import annotations

import sys
import time


def pause() -> None:
    print("paused", flush=True)
    time.sleep(300)


def main() -> None:
    import scene_fixtures  # noqa: F401  (registers clevr and pug where the installed metadata predates them)
    import toy_generator  # noqa: F401  (registers the toy generator whose parts bindscope merge joins)

    from bindscope.cli.main import bindscope, comco, madman
    from bindscope.io import claim

    where, group, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if where == "claimed":
        enter = claim.OutputClaim.__enter__

        def entered(self):
            result = enter(self)
            try:
                pause()
            except BaseException:
                self.__exit__(*sys.exc_info())
                raise
            return result
        claim.OutputClaim.__enter__ = entered
    elif where == "staging":
        staging = claim.OutputClaim.staging

        def staged(self):
            folder = staging(self)
            (folder / "partial").write_bytes(b"x")
            pause()
            return folder
        claim.OutputClaim.staging = staged
    elif where == "file":
        from bindscope.io.atomic import atomic_open
        from bindscope.publish import open_clip_config

        def half_written(path, text):
            with atomic_open(path) as handle:
                handle.write(text[:1].encode())
                handle.flush()
                pause()
        open_clip_config.write_text_atomic = half_written
    else:
        raise SystemExit(f"unknown pause {where!r}")
    {"madman": madman, "comco": comco, "bindscope": bindscope}[group].main(args, prog_name=group)


if __name__ == "__main__":
    main()
