"""After the workshop: remove the learners' Unix accounts the hub made (sudo make workshop-clean).

    python workshop/clean_up.py [--homes workshop/.run/homes] [--keep-homes]

An account is a learner's when its home lies under the hub's homes folder (WORKSHOP_HOMES):
exactly the accounts jupyterhub_config.py made with useradd, never one the machine had before.
Each is removed with `userdel` (its home too, unless --keep-homes), with its kernels' socket
folder.  Collect and grade first (make collect, make autograde): the work is in those homes.
Refuses while any of those users still runs a process (stop the hub first: Ctrl-C).
"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNTIME = Path(os.environ.get("WORKSHOP_RUNTIME") or "/run/workshop-kernels")


def learner_accounts(homes: Path) -> list[pwd.struct_passwd]:
    homes = homes.resolve()
    return sorted((a for a in pwd.getpwall() if a.pw_uid != 0 and Path(a.pw_dir).is_relative_to(homes)),
                  key=lambda a: a.pw_name)


def running(uids: set[int]) -> list[str]:
    """'NAME (pid N)' of every process owned by one of `uids` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    found.append(f"{pwd.getpwuid(entry.stat().st_uid).pw_name} (pid {entry.name})")
            except (FileNotFoundError, KeyError):
                continue
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python workshop/clean_up.py", description=__doc__.split("\n")[0])
    parser.add_argument("--homes", type=Path,
                        default=Path(os.environ.get("WORKSHOP_HOMES") or HERE / ".run" / "homes"))
    parser.add_argument("--keep-homes", action="store_true", help="remove the accounts, keep their homes")
    args = parser.parse_args(argv)
    if os.getuid() != 0:
        print("error: removing Unix users needs root: sudo make workshop-clean", file=sys.stderr)
        return 1
    accounts = learner_accounts(args.homes)
    busy = running({a.pw_uid for a in accounts})
    if busy:
        print(f"error: learners' processes still run ({', '.join(busy[:5])}): stop the hub (Ctrl-C) first",
              file=sys.stderr)
        return 1
    for account in accounts:
        command = ["userdel", account.pw_name] if args.keep_homes else ["userdel", "--remove", account.pw_name]
        out = subprocess.run(command, capture_output=True, text=True)
        if out.returncode not in (0, 12):       # 12: the home could not be removed (already gone)
            print(f"error: {' '.join(command)}: {out.stderr.strip()}", file=sys.stderr)
            return 1
        shutil.rmtree(RUNTIME / str(account.pw_uid), ignore_errors=True)
        print(f"removed {account.pw_name}" + ("" if args.keep_homes else f" and {account.pw_dir}"))
    print(f"{len(accounts)} learner accounts removed (homes under {args.homes.resolve()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
