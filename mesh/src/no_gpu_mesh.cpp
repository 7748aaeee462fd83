// SPDX-License-Identifier: MIT
// The cuFFT backend in a build without CUDA: asking for it is the user's error, said in one line.
#include "gpu_mesh.hpp"
#include "gpu_slab.hpp"
#include "matcha/core/errors.hpp"

namespace matcha::mesh {

bool cufftMeshBuilt() { return false; }

namespace detail {

struct GpuMesh::Impl {};

GpuMesh::GpuMesh(const MeshParams& /*params*/) {
  throw InputError("the cuFFT particle mesh is not built into this binary (configure with CUDA to get it)");
}
GpuMesh::~GpuMesh() = default;
// Unreachable: the constructor throws.
std::size_t GpuMesh::launch(const SourceView& sources, double /*G*/, bool /*wantPotentials*/) { return sources.count; }
void GpuMesh::orderResults(std::span<const std::uint32_t> /*newOrder*/) {}
GpuMeshResult GpuMesh::collect(double* /*waitSeconds*/) { return {}; }
void GpuMesh::drop() {}
MeshStageSeconds GpuMesh::lastStageSeconds() const { return {}; }
void GpuMesh::setDensityReduction(std::function<void(std::span<double>)> /*reduce*/) {}

struct GpuSlabMesh::Impl {};

GpuSlabMesh::GpuSlabMesh(const MeshParams& /*params*/, SlabSplit /*split*/, SlabComm /*comm*/) {
  throw InputError("the cuFFT slab mesh is not built into this binary (configure with CUDA to get it)");
}
GpuSlabMesh::~GpuSlabMesh() = default;
// Unreachable: the constructor throws.
double* GpuSlabMesh::records(std::size_t /*count*/) { return nullptr; }
void GpuSlabMesh::beginCall(std::size_t /*count*/, GpuSlabSeconds& /*seconds*/) {}
double GpuSlabMesh::pass(double /*offset*/, double /*G*/, bool /*potentials*/, double /*weight*/,
                         GpuSlabSeconds& /*seconds*/) {
  return 0;
}
void GpuSlabMesh::endCall(GpuSlabSeconds& /*seconds*/) {}
bool GpuSlabMesh::directTransposes() const { return false; }
std::size_t GpuSlabMesh::deviceBytes() const { return 0; }
std::size_t GpuSlabMesh::hostBytes() const { return 0; }

}  // namespace detail
}  // namespace matcha::mesh
