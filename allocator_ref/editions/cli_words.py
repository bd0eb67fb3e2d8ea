"""``--help`` in the reader's language: an argparse parser whose help, titles and usage are looked up
in the tools' catalogue when they are shown.

The help sentences stay literal English where each argument is declared (``help="..."``), as before;
``python -m allocator_ref.editions update`` reads every ``help=`` and ``description=`` literal of the
package (tool_catalogues.py) into ``doctor.po``, and this parser says each one through that catalogue
at the moment ``--help`` prints (argparse's ``HelpFormatter`` formats ``action.help`` then).  Argparse's
own headings ("usage:", "options") come from its gettext calls, which find no Chinese catalogue, so
they are said here instead.  Only what ``--help`` shows is translated; argparse's error lines keep
its English (they name the argument and value, which carry the meaning).
"""
from __future__ import annotations

import argparse
import sys

from .language import language
from .messages import say, translator

tr = translator("doctor")


class CourseHelpFormatter(argparse.HelpFormatter):
    def add_usage(self, usage, actions, groups, prefix=None):
        return super().add_usage(usage, actions, groups, tr("usage: ") if prefix is None else prefix)


class CourseParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose help reads in the reader's language (subparsers inherit it)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", CourseHelpFormatter)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        return self._translated(super().format_help)

    def format_usage(self) -> str:
        return self._translated(super().format_usage)

    def _translated(self, format_text) -> str:
        """Swap each help sentence for its catalogue entry while formatting, then put the English back
        (the parser is reused: a second --help in another language must find the English to look up)."""
        shown = list(self._actions)
        for action in self._actions:        # a subcommand's one-line help lives on a pseudo-action
            shown += getattr(action, "_choices_actions", [])
        saved = [(a, a.help) for a in shown]
        saved_titles = [(g, g.title) for g in self._action_groups]
        saved_description = self.description
        try:
            for action, text in saved:
                if isinstance(text, str) and text != argparse.SUPPRESS:
                    action.help = _help_words(text)
            for group, title in saved_titles:
                if title:
                    group.title = _help_words(title)
            if self.description:
                self.description = say("doctor", self.description)
            return format_text()
        finally:
            for action, text in saved:
                action.help = text
            for group, title in saved_titles:
                group.title = title
            self.description = saved_description


def _help_words(text: str) -> str:
    """One help sentence or group title; argparse's own ones are literal here so the catalogue has them."""
    own = {"show this help message and exit": tr("show this help message and exit"),
           "positional arguments": tr("positional arguments"), "options": tr("options")}
    if text in own:
        return own[text]
    # ``%(default)s`` and friends are argparse's fields, filled after this lookup: say() leaves them alone
    return say("doctor", text)


def language_asked(argv=None) -> str | None:
    """``--lang``'s value when the command line has one, read before the real parse: ``-h`` prints the
    moment argparse meets it, so ``replay -h --lang zh`` must know the language first."""
    args = sys.argv[1:] if argv is None else list(argv)
    for i, word in enumerate(args):
        if word == "--":
            break
        if word == "--lang" and i + 1 < len(args):
            return args[i + 1]
        if word.startswith("--lang="):
            return word.split("=", 1)[1]
    return None


def help_language(argv=None) -> str:
    """The language ``--help`` speaks: ``--lang``, else what the tools decide (English if that fails:
    the settings error itself is reported by the command, in one line)."""
    from .language import normalise
    asked = language_asked(argv)
    try:
        return normalise(asked) or language() if asked else language()
    except ValueError:            # SettingsError is a ValueError; a bad --lang is argparse's error to say
        return "en"
