# SPDX-License-Identifier: MIT
"""A matcha snapshot in yt: a plain yt.load and a ParticleProjectionPlot work (BoxSize > 0 gives the "unitary"
unit), and the README's loader, with the units of /Units, reproduces G = 1 (the Plummer sphere's virial ratio and a
dynamical time of 4.71 Myr per N-body time unit). Usage: yt_load.py MATCHA_BINARY SCRATCH_DIR. Exit 77: yt is not
installed (Debian: apt-get install python3-yt), the test is skipped."""
import math
import os
import shutil
import subprocess
import sys

try:
    import yt
except ImportError:
    print("yt is not installed (apt-get install python3-yt): test skipped")
    sys.exit(77)

matcha, scratch = sys.argv[1], sys.argv[2]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
out = os.path.join(scratch, "run")
subprocess.run([matcha, "run", "-n", "2048", "--t-end", "0.25", "--output-interval", "0.25", "--out", out],
               check=True, stdout=subprocess.DEVNULL)
snapshot = os.path.join(out, "snapshot_001.hdf5")

yt.set_log_level(40)
plain = yt.load(snapshot)
plot = yt.ParticleProjectionPlot(plain, "z", ("PartType1", "Masses"))
plot.save(os.path.join(scratch, "projection.png"))
assert os.path.getsize(os.path.join(scratch, "projection.png")) > 0

# The README's loader: the units of /Units and a box around the bodies.
import h5py  # noqa: E402  (only once yt is known to be there)

with h5py.File(snapshot, "r") as f:
    units = f["Units"].attrs
    box = float(f["Header"].attrs["BoxSize"])
    velocity_km_s = float(units["UnitVelocity_in_cm_per_s"]) / 1e5
ds = yt.load(snapshot,
             unit_base={"length": (1.0, "kpc"), "mass": (1e10, "Msun"), "velocity": (velocity_km_s, "km/s")},
             bounding_box=[[-box / 2, box / 2]] * 3)
ad = ds.all_data()
G = yt.units.physical_constants.G
mass = ad["PartType1", "Masses"].to("Msun")
total = float(mass.sum())
assert abs(total - 1e10) < 1e-6 * 1e10, total
# G = 1 in these units: G M / (L V^2) with the file's units.
L = ds.length_unit.to("cm")
M = ds.mass_unit.to("g")
V = ds.velocity_unit.to("cm/s")
g_code = float((G * M / (L * V * V)).to("dimensionless"))
assert abs(g_code - 1.0) < 1e-4, g_code
T = float(ds.time_unit.to("Myr"))
assert abs(T - 4.7148) < 1e-3, T
assert abs(float(ds.current_time.to("Myr")) - 0.25 * T) < 1e-6 * T
plot = yt.ParticleProjectionPlot(ds, "z", ("PartType1", "Masses"))
plot.save(os.path.join(scratch, "projection-readme.png"))
print("yt %s: plain load and projection plot work; README units give G = %.6f, time unit %.4f Myr"
      % (yt.__version__, g_code, T))
