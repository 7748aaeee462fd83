# SPDX-License-Identifier: MIT
"""What matcha's plot scripts share: one-line errors, and figures written atomically (a reader never sees half a
PNG, and an error leaves no temporary file behind)."""

import os
import sys


def fail(program, message, code):
    """Prints `program: error: message` on one line to stderr and exits with `code`."""
    print(program + ": error: " + " ".join(str(message).split()), file=sys.stderr)
    sys.exit(code)


def save_atomically(figure, out, dpi):
    """Saves a matplotlib figure to `out` (format from its extension, PNG without one) through a temporary file in
    the same folder, renamed into place; closes the figure."""
    import matplotlib.pyplot as plt

    directory = os.path.dirname(os.path.abspath(out))
    temporary = os.path.join(directory, ".%s.tmp-%d" % (os.path.basename(out), os.getpid()))
    extension = os.path.splitext(out)[1][1:] or "png"
    try:
        figure.savefig(temporary, dpi=dpi, format=extension)
        os.replace(temporary, out)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    finally:
        plt.close(figure)
