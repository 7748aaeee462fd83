#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# DESIGN.md §2: tree/ and gpu/ never include each other, core/ includes no other module, mesh/ includes core/ only,
# cosmology/ core/ and mesh/ only (the power spectrum deposits on mesh/'s MassMesh), lib/ core/ and gpu/ only, parallel/
# core/ and tree/ only (it takes an engine through core's NearFieldEngine), and no
# .cpp outside gpu/ includes CUDA headers. Cheap enough to run first in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
check() {  # folder, forbidden include pattern, rule
  if grep -rnE "#include [<\"]($2)" "$1" 2>/dev/null; then
    echo "module boundary violated: $3" >&2
    status=1
  fi
}
check tree "matcha/gpu/" "tree/ must not include gpu/ (they meet only through core/)"
check gpu "matcha/tree/" "gpu/ must not include tree/ (they meet only through core/)"
check core "matcha/(tree|gpu|io|ic|integrator|mesh|cosmology|parallel)/" "core/ depends on Eigen only"
check mesh "matcha/(tree|gpu|io|ic|integrator|cosmology)/" "mesh/ depends on core only"
check cosmology "matcha/(tree|gpu|io|ic|integrator)/" "cosmology/ depends on core and mesh only"
check integrator "matcha/(tree|gpu|io|ic)/" "integrator/ sees only core's ForceSolver"
check lib "matcha/(tree|io|ic|integrator|mesh|cosmology)/" "lib/ (the C libraries) includes core and gpu only"
check parallel "matcha/(gpu|io|ic|integrator|mesh|cosmology)/" "parallel/ (MPI) depends on core and tree only"
check tree "matcha/parallel/" "tree/ must not include parallel/ (parallel/ builds on tree/, only with MATCHA_MPI)"
check gpu "matcha/parallel/" "gpu/ must not include parallel/ (a rank hands parallel/ its engine, not the other way)"
if grep -rnE --include='*.cpp' --include='*.hpp' '#include [<"](cuda_runtime|cuda)\.h' core tree gpu integrator ic io mesh cosmology lib parallel apps; then
  echo "module boundary violated: only gpu/*.cu may include CUDA headers" >&2
  status=1
fi
[ $status -eq 0 ] && echo "module boundaries: ok"
exit $status
