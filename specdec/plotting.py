"""Plot helpers so notebook cells stay short: a roofline on log axes."""

import matplotlib.pyplot as plt
import numpy as np


def roofline(ax, flops_per_s, bandwidth_bytes_per_s, label, intensity_range=(0.1, 1e4), **style):
    """Draw attainable FLOP/s = min(peak, intensity * bandwidth) on log-log axes; returns the ridge."""
    x = np.logspace(np.log10(intensity_range[0]), np.log10(intensity_range[1]), 200)
    ax.plot(x, np.minimum(flops_per_s, x * bandwidth_bytes_per_s), label=label, **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable FLOP/s")
    return flops_per_s / bandwidth_bytes_per_s


def new_axes(title, figsize=(7, 4.5)):
    """A fresh figure and axes with a one-line takeaway as title."""
    fig, ax = plt.subplots(figsize=figsize)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    return fig, ax
