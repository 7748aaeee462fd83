// SPDX-License-Identifier: MIT
// HDF5 snapshots through the HDF5 C API. The RAII handles and the helpers that checkpoint.cpp shares live in
// matcha::io::detail (snapshot_internal.hpp); the layout is described in matcha/io/snapshot.hpp.
#include "matcha/io/snapshot.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <tuple>

#include "matcha/core/errors.hpp"
#include "matcha/core/version.hpp"
#include "snapshot_internal.hpp"

namespace matcha::io {
namespace detail {

std::string oneLine(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  return text;
}

std::string quoted(const std::filesystem::path& path) { return std::string("'") + oneLine(path.string()) + "'"; }

std::string hdf5ErrorText() {
  std::vector<std::string> descriptions;  // innermost first
  auto collect = [](unsigned, const H5E_error2_t* error, void* data) -> herr_t {
    auto* out = static_cast<std::vector<std::string>*>(data);
    try {
      if (error != nullptr && error->desc != nullptr && error->desc[0] != '\0') out->emplace_back(error->desc);
    } catch (...) {
      return -1;  // never let an exception cross the C library
    }
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &descriptions);
  if (descriptions.empty()) return "no HDF5 error details";
  if (descriptions.size() == 1 || descriptions.front() == descriptions.back()) return oneLine(descriptions.front());
  return oneLine(descriptions.back() + " (" + descriptions.front() + ")");
}

Handle checked(hid_t id, Handle::Closer closer, const std::string& what) {
  if (id < 0) throw IoError(what + " failed: " + hdf5ErrorText());
  return Handle(id, closer);
}

void check(herr_t status, const std::string& what) {
  if (status < 0) throw IoError(what + " failed: " + hdf5ErrorText());
}

bool linkExists(hid_t loc, const char* name, const std::string& what) {
  const htri_t exists = H5Lexists(loc, name, H5P_DEFAULT);
  if (exists < 0) throw IoError("looking up " + what + " failed: " + hdf5ErrorText());
  return exists > 0;
}

Handle makeFileAccessList() {
  Handle fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate(file access)");
#if (H5_VERSION_GE(1, 10, 7) && !H5_VERSION_GE(1, 11, 0)) || H5_VERSION_GE(1, 12, 1)
  check(H5Pset_file_locking(fapl.get(), true, true), "H5Pset_file_locking");
#endif
  return fapl;
}

[[noreturn]] void rethrowWithPrefix(const std::string& prefix) {
  try {
    throw;
  } catch (const InputError& error) {
    throw InputError(prefix + oneLine(error.what()));
  } catch (const IoError& error) {
    throw IoError(prefix + oneLine(error.what()));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    throw IoError(prefix + oneLine(error.what()));
  }
}

}  // namespace detail

namespace {

using detail::check;
using detail::checked;
using detail::Handle;
using detail::HeaderInfo;
using detail::oneLine;

constexpr hsize_t kBlockRows = hsize_t{1} << 16;  // rows per N x 3 transfer: bounds the scratch buffer (1.5 MiB)
constexpr const char* kGroup = "PartType1";
constexpr std::int64_t kMaxSnapshotFiles = std::int64_t{1} << 16;  // files of a multi-file snapshot, at most

std::string errnoText(int code) { return std::error_code(code, std::generic_category()).message(); }

// ---------------------------------------------------------------------------------------------------------------
// Parameters as text <-> typed attributes
// ---------------------------------------------------------------------------------------------------------------

struct TypedValue {
  enum class Kind { integer, real, text } kind = Kind::text;
  std::int64_t integer = 0;
  double real = 0.0;
};

/// Integer-looking (optional sign, digits, fits int64) -> integer; another complete finite number -> real; else text.
TypedValue classify(const std::string& text) {
  TypedValue value;
  std::string_view body(text);
  if (!body.empty() && body.front() == '+') body.remove_prefix(1);  // from_chars rejects a leading '+'
  if (body.empty() || body.front() == '+' || (body.front() == '-' && body.size() < text.size())) return value;
  const std::string_view digits = body.front() == '-' ? body.substr(1) : body;
  const bool integerLooking =
      !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  const char* first = body.data();
  const char* last = body.data() + body.size();
  if (integerLooking) {
    const auto [end, ec] = std::from_chars(first, last, value.integer);
    if (ec == std::errc() && end == last) {
      value.kind = TypedValue::Kind::integer;
      return value;
    }
  }
  const auto [end, ec] = std::from_chars(first, last, value.real, std::chars_format::general);
  if (ec == std::errc() && end == last && std::isfinite(value.real)) value.kind = TypedValue::Kind::real;
  return value;
}

template <class T>
std::string shortestText(T number) {
  std::array<char, 64> buffer{};
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), number);
  return ec == std::errc() ? std::string(buffer.data(), end) : std::string("?");
}

// ---------------------------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------------------------

/// Writes attribute `name` on `loc`: `count` values (0 = scalar) stored as `fileType`, read from `data` as `memType`.
void writeAttribute(hid_t loc, const char* name, hid_t fileType, hid_t memType, const void* data, hsize_t count) {
  const std::string what = std::string("attribute ") + name;
  Handle space = count == 0 ? checked(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate(" + what + ")")
                            : checked(H5Screate_simple(1, &count, nullptr), H5Sclose, "H5Screate(" + what + ")");
  Handle attribute = checked(H5Acreate2(loc, name, fileType, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                             "H5Acreate2(" + what + ")");
  check(H5Awrite(attribute.get(), memType, data), "H5Awrite(" + what + ")");
}

void writeScalar(hid_t loc, const char* name, double value) {
  writeAttribute(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, 0);
}

/// Writes a 1-D dataset of `count` values.
void writeColumn(hid_t group, const char* name, hid_t fileType, hid_t memType, const void* data, hsize_t count) {
  const std::string what = std::string(kGroup) + "/" + name;
  Handle space = checked(H5Screate_simple(1, &count, nullptr), H5Sclose, "H5Screate_simple(" + what + ")");
  Handle dataset = checked(H5Dcreate2(group, name, fileType, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                           H5Dclose, "H5Dcreate2(" + what + ")");
  check(H5Dwrite(dataset.get(), memType, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "H5Dwrite(" + what + ")");
}

/// Writes an N x 3 double dataset from three SoA columns, interleaving them block by block, each value times `scale`
/// (1: as held, bit for bit).
void writeTriples(hid_t group, const char* name, const std::vector<double>& x, const std::vector<double>& y,
                  const std::vector<double>& z, double scale = 1.0) {
  const std::string what = std::string(kGroup) + "/" + name;
  const hsize_t count = x.size();
  const std::array<hsize_t, 2> dims{count, 3};
  Handle fileSpace = checked(H5Screate_simple(2, dims.data(), nullptr), H5Sclose, "H5Screate_simple(" + what + ")");
  Handle dataset =
      checked(H5Dcreate2(group, name, H5T_IEEE_F64LE, fileSpace.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
              "H5Dcreate2(" + what + ")");
  std::vector<double> buffer(std::min(count, kBlockRows) * 3);
  for (hsize_t first = 0; first < count; first += kBlockRows) {
    const hsize_t rows = std::min(kBlockRows, count - first);
    for (hsize_t i = 0; i < rows; ++i) {
      buffer[3 * i + 0] = x[first + i] * scale;
      buffer[3 * i + 1] = y[first + i] * scale;
      buffer[3 * i + 2] = z[first + i] * scale;
    }
    const std::array<hsize_t, 2> start{first, 0};
    const std::array<hsize_t, 2> extent{rows, 3};
    check(H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr),
          "H5Sselect_hyperslab(" + what + ")");
    Handle memSpace = checked(H5Screate_simple(2, extent.data(), nullptr), H5Sclose, "H5Screate_simple(" + what + ")");
    check(H5Dwrite(dataset.get(), H5T_NATIVE_DOUBLE, memSpace.get(), fileSpace.get(), H5P_DEFAULT, buffer.data()),
          "H5Dwrite(" + what + ")");
  }
}

void checkWritable(const Particles& particles, const SnapshotMetadata& meta, const SnapshotWriteOptions& options) {
  const std::size_t count = particles.size();
  for (const auto* array : {&particles.x, &particles.y, &particles.z, &particles.vx, &particles.vy, &particles.vz,
                            &particles.ax, &particles.ay, &particles.az, &particles.pot}) {
    MATCHA_ASSERT(array->size() == count, "particle arrays differ in length");
  }
  MATCHA_ASSERT(particles.id.size() == count, "particle id array differs in length");
  if (const auto& part = options.filePart) {
    if (part->count < 1 || part->index < 0 || part->index >= part->count) {
      throw InputError("file " + std::to_string(part->index) + " of a snapshot of " + std::to_string(part->count) +
                       " files");
    }
    if (count > part->totalBodies) {
      throw InputError(std::to_string(count) + " bodies in one file of a snapshot of " +
                       std::to_string(part->totalBodies));
    }
    if (part->totalBodies == 0) throw InputError("there are no bodies to write");
  } else if (count == 0) {
    throw InputError("there are no bodies to write");
  }
  if (count > std::numeric_limits<std::uint32_t>::max()) {
    throw InputError(std::to_string(count) + " bodies do not fit the uint32 NumPart_ThisFile of one file");
  }
  std::set<std::string_view> names;
  for (const auto& [name, value] : meta.parameters) {
    if (name.empty()) throw InputError("a parameter has an empty name");
    if (!names.insert(name).second) throw InputError("parameter '" + oneLine(name) + "' is given twice");
  }
}

/// An open-boundary state's BoxSize from its largest |coordinate|: twice it, 1 when it is 0.
double openBoxSize(double largest) { return largest > 0.0 ? 2.0 * largest : 1.0; }

/// The /Header counts of a file of `particles` written with `options`.
detail::HeaderCounts headerCounts(const Particles& particles, const SnapshotMetadata& meta,
                                  const SnapshotWriteOptions& options) {
  const auto& part = options.filePart;
  detail::HeaderCounts counts;
  counts.thisFile = particles.size();
  counts.total = part ? part->totalBodies : counts.thisFile;
  counts.numFiles = part ? part->count : 1;
  // Open boundaries: a GADGET reader takes [0, BoxSize]^3 as the domain and its side as yt's "unitary" unit, which a
  // BoxSize of 0 breaks; so BoxSize is the side of the smallest origin-centred cube holding every body (twice the
  // largest |coordinate|), and the README's loader gives yt that cube as the bounding box. MatchaPeriodic tells the
  // two meanings apart when matcha reads the file back.
  if (meta.boxSize > 0.0) {
    counts.boxSize = meta.boxSize;
  } else {
    counts.boxSize =
        openBoxSize(part && part->largestCoordinate >= 0.0 ? part->largestCoordinate : largestCoordinate(particles));
  }
  return counts;
}

/// The whole snapshot into the new, open `file`.
void writeContents(hid_t file, const Particles& particles, const SnapshotMetadata& meta,
                   const SnapshotWriteOptions& options) {
  detail::writeHeader(file, meta, headerCounts(particles, meta, options));
  detail::writeUnits(file, meta.units);
  detail::writeParameters(file, meta.parameters);
  {
    Handle group = detail::createGroup(file, kGroup, false);
    const hid_t g = group.get();
    const hsize_t count = particles.size();
    auto done = [&](const char* name) {
      if (options.afterDataset) options.afterDataset(std::string(kGroup) + "/" + name);
    };
    writeTriples(g, "Coordinates", particles.x, particles.y, particles.z);
    done("Coordinates");
    writeTriples(g, "Velocities", particles.vx, particles.vy, particles.vz, options.velocityScale);
    done("Velocities");
    writeColumn(g, "Masses", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, particles.mass.data(), count);
    done("Masses");
    writeColumn(g, "ParticleIDs", H5T_STD_U64LE, H5T_NATIVE_UINT64, particles.id.data(), count);
    done("ParticleIDs");
    if (options.includeForces) {
      if (options.includePotential) {
        writeColumn(g, "Potential", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, particles.pot.data(), count);
        done("Potential");
      }
      writeTriples(g, "Acceleration", particles.ax, particles.ay, particles.az);
      done("Acceleration");
    }
  }
  if (options.checkpointRun != nullptr || options.checkpointSolver != nullptr) {
    Handle checkpoint = detail::createGroup(file, "Checkpoint", false);
    if (options.checkpointRun != nullptr) detail::writeState(checkpoint.get(), "Run", *options.checkpointRun);
    if (options.checkpointSolver != nullptr) detail::writeState(checkpoint.get(), "Solver", *options.checkpointSolver);
  }
}

/// fsync()s a closed file so that the rename publishes data that are on disk, not only in the page cache.
void syncFile(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int code = errno;  // before anything else can change it
    throw IoError("cannot reopen " + detail::quoted(file) + " to sync it: " + errnoText(code));
  }
  const int status = ::fsync(fd);
  const int code = errno;
  ::close(fd);
  if (status != 0) throw IoError("fsync of " + detail::quoted(file) + " failed: " + errnoText(code));
}

std::filesystem::path temporaryPathFor(const std::filesystem::path& target) {
  static std::atomic<unsigned> counter{0};  // tells apart concurrent writes of one process
  const std::string name = std::string(".") + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                           std::to_string(counter.fetch_add(1));
  return target.parent_path() / name;
}

// ---------------------------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------------------------

/// Reads a numeric attribute of `loc` converted to `memType` (T's native type); nullopt when absent.
template <class T>
std::optional<std::vector<T>> readNumericAttribute(hid_t loc, const char* name, hid_t memType,
                                                   const std::string& where) {
  const std::string what = where + " " + name;
  const htri_t exists = H5Aexists(loc, name);
  if (exists < 0) throw IoError("looking up attribute " + what + " failed: " + detail::hdf5ErrorText());
  if (exists == 0) return std::nullopt;
  Handle attribute = checked(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, "H5Aopen(" + what + ")");
  Handle type = checked(H5Aget_type(attribute.get()), H5Tclose, "H5Aget_type(" + what + ")");
  const H5T_class_t typeClass = H5Tget_class(type.get());
  if (typeClass != H5T_INTEGER && typeClass != H5T_FLOAT) throw InputError("attribute " + what + " is not numeric");
  Handle space = checked(H5Aget_space(attribute.get()), H5Sclose, "H5Aget_space(" + what + ")");
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  if (count < 0) throw IoError("H5Sget_simple_extent_npoints(" + what + ") failed: " + detail::hdf5ErrorText());
  std::vector<T> values(static_cast<std::size_t>(count));
  if (count > 0) check(H5Aread(attribute.get(), memType, values.data()), "H5Aread(" + what + ")");
  return values;
}

/// Names of the attributes of `group`, in creation order when the file tracks it, else in name order.
std::vector<std::string> attributeNames(hid_t group) {
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    try {
      static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    } catch (...) {
      return -1;  // never let an exception cross the C library
    }
    return 0;
  };
  std::vector<std::string> names;
  Handle gcpl = checked(H5Gget_create_plist(group), H5Pclose, "H5Gget_create_plist(/Parameters)");
  unsigned flags = 0;
  if (H5Pget_attr_creation_order(gcpl.get(), &flags) >= 0 && (flags & H5P_CRT_ORDER_TRACKED) != 0) {
    hsize_t index = 0;
    if (H5Aiterate2(group, H5_INDEX_CRT_ORDER, H5_ITER_INC, &index, collect, &names) >= 0) return names;
    names.clear();
  }
  hsize_t index = 0;
  check(H5Aiterate2(group, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names), "H5Aiterate2(/Parameters)");
  return names;
}

std::vector<std::pair<std::string, std::string>> readParameters(hid_t file) {
  std::vector<std::pair<std::string, std::string>> parameters;
  if (!detail::linkExists(file, "Parameters", "group /Parameters")) return parameters;
  Handle group = checked(H5Gopen2(file, "Parameters", H5P_DEFAULT), H5Gclose, "H5Gopen2(/Parameters)");
  for (const std::string& name : attributeNames(group.get())) {
    if (auto text = detail::attributeText(group.get(), name, "/Parameters"))
      parameters.emplace_back(name, std::move(*text));
  }
  return parameters;
}

/// An opened PartType1 dataset with its checked shape: `rows` x `columns` (columns = 1 for a 1-D dataset).
struct Array {
  Handle dataset;
  std::string name;  // "PartType1/Coordinates"
  hsize_t rows = 0;
};

/// Opens `group`/`name` if present and checks its rank, its column count (3 when `triple`) and its type class
/// (integer for ids, integer or float otherwise).
std::optional<Array> openArray(hid_t group, const char* name, bool triple, bool integerOnly) {
  Array array;
  array.name = std::string(kGroup) + "/" + name;
  if (!detail::linkExists(group, name, "dataset " + array.name)) return std::nullopt;
  const hid_t id = H5Dopen2(group, name, H5P_DEFAULT);
  if (id < 0) throw InputError(array.name + " is not a readable dataset (" + detail::hdf5ErrorText() + ")");
  array.dataset = Handle(id, H5Dclose);
  Handle type = checked(H5Dget_type(id), H5Tclose, "H5Dget_type(" + array.name + ")");
  const H5T_class_t typeClass = H5Tget_class(type.get());
  if (integerOnly && typeClass != H5T_INTEGER) throw InputError(array.name + " must hold integers");
  if (typeClass != H5T_INTEGER && typeClass != H5T_FLOAT) throw InputError(array.name + " must hold numbers");
  Handle space = checked(H5Dget_space(id), H5Sclose, "H5Dget_space(" + array.name + ")");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw IoError("H5Sget_simple_extent_ndims(" + array.name + ") failed: " + detail::hdf5ErrorText());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "H5Sget_simple_extent_dims");
  const int expectedRank = triple ? 2 : 1;
  if (rank != expectedRank || (triple && dims[1] != 3)) {
    std::string shape = rank == 0 ? "scalar" : "";
    for (int i = 0; i < rank; ++i) shape += (i == 0 ? "" : " x ") + std::to_string(dims[static_cast<std::size_t>(i)]);
    throw InputError(array.name + " has shape " + shape + ", expected " + (triple ? "N x 3" : "N"));
  }
  array.rows = dims[0];
  return array;
}

Array requireArray(hid_t group, const char* name, bool triple) {
  auto array = openArray(group, name, triple, false);
  if (!array) throw InputError("missing dataset " + std::string(kGroup) + "/" + name);
  return std::move(*array);
}

void requireRows(const Array& array, hsize_t count) {
  if (array.rows != count) {
    throw InputError(array.name + " has " + std::to_string(array.rows) + " rows but " + kGroup + "/Coordinates has " +
                     std::to_string(count));
  }
}

/// Reads rows [begin, begin + count) of a 1-D dataset, converted to `memType`, into `out`.
void readColumn(const Array& array, hid_t memType, void* out, hsize_t begin, hsize_t count) {
  if (count == 0) return;
  Handle fileSpace = checked(H5Dget_space(array.dataset.get()), H5Sclose, "H5Dget_space(" + array.name + ")");
  check(H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, &begin, nullptr, &count, nullptr),
        "H5Sselect_hyperslab(" + array.name + ")");
  Handle memSpace = checked(H5Screate_simple(1, &count, nullptr), H5Sclose, "H5Screate_simple(" + array.name + ")");
  check(H5Dread(array.dataset.get(), memType, memSpace.get(), fileSpace.get(), H5P_DEFAULT, out),
        "H5Dread(" + array.name + ")");
}

/// Reads rows [begin, begin + count) of an N x 3 dataset (any numeric type, converted to double) into three SoA
/// columns of `count` entries, block by block.
void readTriples(const Array& array, hsize_t begin, hsize_t count, std::vector<double>& x, std::vector<double>& y,
                 std::vector<double>& z) {
  Handle fileSpace = checked(H5Dget_space(array.dataset.get()), H5Sclose, "H5Dget_space(" + array.name + ")");
  std::vector<double> buffer(std::min(count, kBlockRows) * 3);
  for (hsize_t done = 0; done < count; done += kBlockRows) {
    const hsize_t rows = std::min(kBlockRows, count - done);
    const std::array<hsize_t, 2> start{begin + done, 0};
    const std::array<hsize_t, 2> extent{rows, 3};
    check(H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr),
          "H5Sselect_hyperslab(" + array.name + ")");
    Handle memSpace =
        checked(H5Screate_simple(2, extent.data(), nullptr), H5Sclose, "H5Screate_simple(" + array.name + ")");
    check(H5Dread(array.dataset.get(), H5T_NATIVE_DOUBLE, memSpace.get(), fileSpace.get(), H5P_DEFAULT, buffer.data()),
          "H5Dread(" + array.name + ")");
    for (hsize_t i = 0; i < rows; ++i) {
      x[done + i] = buffer[3 * i + 0];
      y[done + i] = buffer[3 * i + 1];
      z[done + i] = buffer[3 * i + 2];
    }
  }
}

/// The columns hold rows firstRow, firstRow + 1, ... of the file: messages name the file's row ("body 3").
void requireFiniteValues(std::initializer_list<const std::vector<double>*> columns, const std::string& name,
                         const std::vector<std::uint64_t>& ids, hsize_t firstRow) {
  for (const auto* column : columns) {
    const auto bad = std::find_if(column->begin(), column->end(), [](double v) { return !std::isfinite(v); });
    if (bad != column->end()) {
      const auto body = static_cast<std::size_t>(bad - column->begin());
      throw InputError(name + " has a NaN or infinite value at body " + std::to_string(firstRow + body) +
                       " (ParticleID " + std::to_string(ids[body]) + ")");
    }
  }
}

/// Masses agree with MassTable[1] to this relative difference: float Masses against a double MassTable differ by
/// up to 6e-8.
constexpr double kMassTableTolerance = 1e-6;

/// Reads rows [begin, begin + count) of ParticleIDs into `out` (count entries). Ids stored as signed integers are read
/// as int64 and checked: HDF5 would convert a negative one to 0 when reading into uint64.
void readIds(const Array& ids, hsize_t begin, hsize_t count, std::vector<std::uint64_t>& out) {
  Handle type = checked(H5Dget_type(ids.dataset.get()), H5Tclose, "H5Dget_type(" + ids.name + ")");
  const bool isSigned = H5Tget_sign(type.get()) == H5T_SGN_2;
  static_assert(sizeof(std::int64_t) == sizeof(std::uint64_t));
  readColumn(ids, isSigned ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, out.data(), begin, count);
  if (!isSigned) return;
  const auto negative =
      std::find_if(out.begin(), out.end(), [](std::uint64_t id) { return static_cast<std::int64_t>(id) < 0; });
  if (negative != out.end()) {
    throw InputError(ids.name + " has a negative ParticleID (" + std::to_string(static_cast<std::int64_t>(*negative)) +
                     ") at body " + std::to_string(begin + static_cast<hsize_t>(negative - out.begin())) +
                     "; ids must be >= 0");
  }
}

/// An id that `ids` holds twice, if any.
std::optional<std::uint64_t> repeatedId(std::vector<std::uint64_t> ids) {
  std::sort(ids.begin(), ids.end());
  const auto repeated = std::adjacent_find(ids.begin(), ids.end());
  if (repeated == ids.end()) return std::nullopt;
  return *repeated;
}

Handle openParticleGroup(hid_t file) {
  if (!detail::linkExists(file, kGroup, std::string("group /") + kGroup)) {
    throw InputError(std::string("missing group /") + kGroup);
  }
  const hid_t groupId = H5Gopen2(file, kGroup, H5P_DEFAULT);
  if (groupId < 0)
    throw InputError(std::string("/") + kGroup + " is not a readable group (" + detail::hdf5ErrorText() + ")");
  return Handle(groupId, H5Gclose);
}

/// A snapshot file opened for reading: its PartType1 group, its Coordinates (whose rows are the file's bodies) and its
/// checked header.
struct SnapshotFile {
  Handle file;  // declared first: closed last
  Handle group;
  Array coordinates;
  HeaderInfo header;
};

SnapshotFile openSnapshotFile(Handle file) {
  SnapshotFile opened;
  opened.group = openParticleGroup(file.get());
  opened.coordinates = requireArray(opened.group.get(), "Coordinates", true);
  const hsize_t count = opened.coordinates.rows;
  if (count == 0) {
    // No rows: an empty file of a multi-file set, or a snapshot without bodies (which its header's totals, where it
    // has them, would report less plainly).
    bool emptyPart = false;
    try {
      opened.header = detail::readHeader(file.get(), count);
      emptyPart = opened.header.numFiles > 1;
    } catch (const InputError&) {
    }
    if (!emptyPart) throw InputError(opened.coordinates.name + " has 0 rows: the snapshot holds no bodies");
  } else {
    opened.header = detail::readHeader(file.get(), count);
  }
  opened.file = std::move(file);
  return opened;
}

/// The fields of a Snapshot besides its bodies.
Snapshot readMetadata(const SnapshotFile& opened) {
  Snapshot snapshot;
  snapshot.time = opened.header.time;
  snapshot.matchaVersion = opened.header.matchaVersion;
  snapshot.matchaGitCommit = opened.header.matchaGitCommit;
  snapshot.boxSize = opened.header.boxSize;
  snapshot.cosmology = opened.header.cosmology;
  snapshot.units = detail::readUnits(opened.file.get());
  snapshot.parameters = readParameters(opened.file.get());
  return snapshot;
}

/// Rows [begin, begin + count) of an opened file's bodies, checked as readSnapshot checks a file's (ids: within these
/// rows). `setRow`: the place of row `begin` in the whole set, from which bodies without ParticleIDs are numbered.
Particles readRows(const SnapshotFile& opened, hsize_t begin, hsize_t count, std::uint64_t setRow) {
  const hid_t g = opened.group.get();
  const hsize_t rows = opened.coordinates.rows;
  const HeaderInfo& header = opened.header;
  const Array velocities = requireArray(g, "Velocities", true);
  requireRows(velocities, rows);
  const auto masses = openArray(g, "Masses", false, false);
  const auto ids = openArray(g, "ParticleIDs", false, true);
  const auto potential = openArray(g, "Potential", false, false);
  const auto acceleration = openArray(g, "Acceleration", true, false);
  for (const auto* array : {&masses, &ids, &potential, &acceleration}) {
    if (*array) requireRows(**array, rows);
  }
  if (!masses && !(header.massTable1 > 0.0 && std::isfinite(header.massTable1))) {
    throw InputError(std::string("there is no ") + kGroup + "/Masses dataset and /Header MassTable[1] is " +
                     shortestText(header.massTable1) + " (need one of them, MassTable[1] > 0)");
  }

  Particles p;
  p.resize(static_cast<std::size_t>(count));  // bad_alloc for absurd sizes becomes IoError in readSnapshot
  if (ids) {
    readIds(*ids, begin, count, p.id);
    if (const auto repeated = repeatedId(p.id)) {
      throw InputError(ids->name + " repeats ParticleID " + std::to_string(*repeated));
    }
  } else {
    std::iota(p.id.begin(), p.id.end(), setRow);
  }
  readTriples(opened.coordinates, begin, count, p.x, p.y, p.z);
  requireFiniteValues({&p.x, &p.y, &p.z}, opened.coordinates.name, p.id, begin);
  readTriples(velocities, begin, count, p.vx, p.vy, p.vz);
  requireFiniteValues({&p.vx, &p.vy, &p.vz}, velocities.name, p.id, begin);
  if (masses) {
    readColumn(*masses, H5T_NATIVE_DOUBLE, p.mass.data(), begin, count);
    requireFiniteValues({&p.mass}, masses->name, p.id, begin);
    const auto bad = std::find_if(p.mass.begin(), p.mass.end(), [](double m) { return !(m > 0.0); });
    if (bad != p.mass.end()) {
      const auto body = static_cast<std::size_t>(bad - p.mass.begin());
      throw InputError(masses->name + " has a mass <= 0 (" + shortestText(*bad) + ") at body " +
                       std::to_string(begin + body) + " (ParticleID " + std::to_string(p.id[body]) + ")");
    }
    // GADGET's convention: MassTable[1] > 0 means every type-1 body has that mass. A file that says so and also
    // lists other masses contradicts itself; taking either silently could run the wrong system.
    if (header.massTable1 > 0.0) {
      const double expected = header.massTable1;
      const auto differs = std::find_if(p.mass.begin(), p.mass.end(), [expected](double m) {
        return std::abs(m - expected) > kMassTableTolerance * expected;
      });
      if (differs != p.mass.end()) {
        const auto body = static_cast<std::size_t>(differs - p.mass.begin());
        throw InputError("/Header MassTable[1] = " + shortestText(expected) + " but " + masses->name + " has " +
                         shortestText(*differs) + " at body " + std::to_string(begin + body) + " (ParticleID " +
                         std::to_string(p.id[body]) + "); set MassTable[1] to 0 to use the Masses");
      }
    }
  } else {
    std::fill(p.mass.begin(), p.mass.end(), header.massTable1);
  }
  if (potential) {
    readColumn(*potential, H5T_NATIVE_DOUBLE, p.pot.data(), begin, count);
    requireFiniteValues({&p.pot}, potential->name, p.id, begin);
  }
  if (acceleration) {
    readTriples(*acceleration, begin, count, p.ax, p.ay, p.az);
    requireFiniteValues({&p.ax, &p.ay, &p.az}, acceleration->name, p.id, begin);
  }
  return p;
}

/// The file a read starts from: `path`, or the first file of the multi-file set whose one-file name it is.
std::filesystem::path firstFileOf(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && std::filesystem::is_regular_file(multiFilePath(path, 0), ec)) {
    return multiFilePath(path, 0);
  }
  return path;
}

/// The one-file name of the set whose file `path` is ("snapshot_003.2.hdf5" -> "snapshot_003.hdf5" and 2).
std::pair<std::filesystem::path, int> setNameOf(const std::filesystem::path& path) {
  const std::string stem = path.stem().string();
  const std::size_t dot = stem.rfind('.');
  const std::string digits = dot == std::string::npos ? "" : stem.substr(dot + 1);
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw InputError("the header says the snapshot is split over several files (NumFilesPerSnapshot), but the name " +
                     detail::quoted(path.filename()) + " is not NAME.K" + path.extension().string() +
                     ", the name of file K of a set");
  }
  std::filesystem::path whole = path;
  whole.replace_filename(stem.substr(0, dot) + path.extension().string());
  return {whole, std::stoi(digits)};
}

void appendBodies(Particles& to, const Particles& from) {
  for (auto [a, b] : {std::pair{&to.x, &from.x}, std::pair{&to.y, &from.y}, std::pair{&to.z, &from.z},
                      std::pair{&to.vx, &from.vx}, std::pair{&to.vy, &from.vy}, std::pair{&to.vz, &from.vz},
                      std::pair{&to.mass, &from.mass}, std::pair{&to.ax, &from.ax}, std::pair{&to.ay, &from.ay},
                      std::pair{&to.az, &from.az}, std::pair{&to.pot, &from.pot}}) {
    a->insert(a->end(), b->begin(), b->end());
  }
  to.id.insert(to.id.end(), from.id.begin(), from.id.end());
}

/// Every file of a set describes the same snapshot as the `reference` header (`referenceName`'s).
void requireSameSnapshot(const HeaderInfo& header, const HeaderInfo& reference, const std::string& referenceName) {
  if (header.numFiles != reference.numFiles || header.totalBodies != reference.totalBodies ||
      header.time != reference.time || header.boxSize != reference.boxSize) {
    throw InputError("its NumFilesPerSnapshot, NumPart_Total, Time or BoxSize differs from " + referenceName +
                     ": the files come from different snapshots");
  }
}

}  // namespace

namespace detail {

void writeStringAttribute(hid_t loc, const char* name, const std::string& value) {
  const std::string what = std::string("string attribute ") + name;
  Handle type = checked(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy(" + what + ")");
  check(H5Tset_size(type.get(), value.size() + 1), "H5Tset_size(" + what + ")");
  check(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), "H5Tset_strpad(" + what + ")");
  const bool ascii =
      std::all_of(value.begin(), value.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  check(H5Tset_cset(type.get(), ascii ? H5T_CSET_ASCII : H5T_CSET_UTF8), "H5Tset_cset(" + what + ")");
  writeAttribute(loc, name, type.get(), type.get(), value.c_str(), 0);
}

Handle createGroup(hid_t loc, const char* name, bool trackAttributeOrder) {
  const std::string what = std::string("group /") + name;
  Handle gcpl = checked(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "H5Pcreate(" + what + ")");
  if (trackAttributeOrder) {
    // Keeps /Parameters in the order the run gave them, for h5dump/h5py readers and for readSnapshot.
    check(H5Pset_attr_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
          "H5Pset_attr_creation_order(" + what + ")");
  }
  return checked(H5Gcreate2(loc, name, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose, "H5Gcreate2(" + what + ")");
}

void writeHeader(hid_t file, const SnapshotMetadata& meta, const HeaderCounts& counts) {
  Handle header = createGroup(file, "Header", false);
  std::array<std::uint32_t, 6> thisFile{};
  std::array<std::uint32_t, 6> totalLow{};
  std::array<std::uint32_t, 6> totalHigh{};
  thisFile[1] = static_cast<std::uint32_t>(counts.thisFile);  // checkWritable keeps it below 2^32
  totalLow[1] = static_cast<std::uint32_t>(counts.total & 0xffffffffu);
  totalHigh[1] = static_cast<std::uint32_t>(counts.total >> 32);
  const std::array<double, 6> massTable{};  // all 0: masses are per body, in PartType1/Masses
  writeAttribute(header.get(), "NumPart_ThisFile", H5T_STD_U32LE, H5T_NATIVE_UINT32, thisFile.data(), 6);
  writeAttribute(header.get(), "NumPart_Total", H5T_STD_U32LE, H5T_NATIVE_UINT32, totalLow.data(), 6);
  writeAttribute(header.get(), "NumPart_Total_HighWord", H5T_STD_U32LE, H5T_NATIVE_UINT32, totalHigh.data(), 6);
  writeAttribute(header.get(), "MassTable", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, massTable.data(), 6);
  writeScalar(header.get(), "Time", meta.time);
  const CosmologyHeader cosmology = meta.cosmology.value_or(CosmologyHeader{});
  writeScalar(header.get(), "Redshift", cosmology.redshift);
  writeScalar(header.get(), "BoxSize", counts.boxSize);
  const std::int32_t periodicFlag = meta.boxSize > 0.0 ? 1 : 0;
  writeAttribute(header.get(), "MatchaPeriodic", H5T_STD_I32LE, H5T_NATIVE_INT32, &periodicFlag, 0);
  if (meta.step) {
    const std::uint64_t step = *meta.step;
    writeAttribute(header.get(), "Step", H5T_STD_U64LE, H5T_NATIVE_UINT64, &step, 0);
  }
  writeAttribute(header.get(), "NumFilesPerSnapshot", H5T_STD_I32LE, H5T_NATIVE_INT32, &counts.numFiles, 0);
  writeScalar(header.get(), "Omega0", cosmology.omega0);
  writeScalar(header.get(), "OmegaLambda", cosmology.omegaLambda);
  writeScalar(header.get(), "HubbleParam", cosmology.hubbleParam);
  // Which build wrote the file. Named after matcha, never `Code`: yt takes a Header Code attribute for SWIFT's.
  writeStringAttribute(header.get(), "MatchaVersion", kVersion);
  writeStringAttribute(header.get(), "MatchaGitCommit", kGitCommit);
  writeStringAttribute(header.get(), "MatchaGitDirty", kGitDirty);
}

void writeUnits(hid_t file, const UnitSystem& units) {
  Handle group = createGroup(file, "Units", false);
  writeScalar(group.get(), "UnitLength_in_cm", units.lengthInCm);
  writeScalar(group.get(), "UnitMass_in_g", units.massInGram);
  writeScalar(group.get(), "UnitVelocity_in_cm_per_s", units.velocityInCmPerS);
  writeScalar(group.get(), "UnitTime_in_s", units.lengthInCm / units.velocityInCmPerS);
  writeScalar(group.get(), "GravitationalConstant", units.gravitationalConstant);
}

void writeParameters(hid_t file, const std::vector<std::pair<std::string, std::string>>& parameters) {
  Handle group = createGroup(file, "Parameters", true);
  for (const auto& [name, text] : parameters) {
    const TypedValue value = classify(text);
    switch (value.kind) {
      case TypedValue::Kind::integer:
        writeAttribute(group.get(), name.c_str(), H5T_STD_I64LE, H5T_NATIVE_INT64, &value.integer, 0);
        break;
      case TypedValue::Kind::real:
        writeAttribute(group.get(), name.c_str(), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value.real, 0);
        break;
      case TypedValue::Kind::text:
        writeStringAttribute(group.get(), name.c_str(), text);
        break;
    }
  }
}

void writeState(hid_t parent, const char* name, const CheckpointState& state) {
  Handle group = createGroup(parent, name, false);
  for (const auto& [key, value] : state.scalars) writeScalar(group.get(), key.c_str(), value);
  for (const auto& [key, values] : state.doubles) {
    writeColumn(group.get(), key.c_str(), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, values.data(), values.size());
  }
  for (const auto& [key, values] : state.floats) {
    writeColumn(group.get(), key.c_str(), H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, values.data(), values.size());
  }
}

void syncDirectory(const std::filesystem::path& dir) {
  // Some file systems refuse fsync on a directory; that is not an error.
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void writeAtomically(const std::filesystem::path& path, const std::string& prefix,
                     const std::function<void(hid_t file)>& write) {
  const ErrorPrintingOff quiet;
  const std::filesystem::path temporary = temporaryPathFor(path);
  try {
    {
      Handle fapl = makeFileAccessList();
      Handle file = checked(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose,
                            "creating the HDF5 file");
      write(file.get());
      check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "H5Fflush");
      check(file.close(), "H5Fclose");
    }
    syncFile(temporary);
    std::filesystem::rename(temporary, path);  // atomic on POSIX: readers see the old file or the new one
    syncDirectory(path.parent_path());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    rethrowWithPrefix(prefix);
  }
}

Handle openForReading(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) throw IoError("no such file");
  if (ec) throw IoError(ec.message());
  if (status.type() == std::filesystem::file_type::directory) throw IoError("it is a directory");

#if H5_VERSION_GE(1, 12, 0)
  const htri_t isHdf5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t isHdf5 = H5Fis_hdf5(path.c_str());
#endif
  if (isHdf5 < 0) throw IoError("cannot open the file: " + detail::hdf5ErrorText());
  if (isHdf5 == 0) throw InputError("not an HDF5 file");
  Handle fapl = detail::makeFileAccessList();
  const hid_t fileId = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (fileId < 0) throw IoError("cannot open the HDF5 file, truncated or corrupt: " + detail::hdf5ErrorText());
  return Handle(fileId, H5Fclose);
}

std::optional<std::string> attributeText(hid_t loc, const std::string& name, const std::string& where) {
  const std::string what = "attribute " + where + " " + name;
  Handle attribute = checked(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose, "H5Aopen(" + what + ")");
  Handle type = checked(H5Aget_type(attribute.get()), H5Tclose, "H5Aget_type(" + what + ")");
  Handle space = checked(H5Aget_space(attribute.get()), H5Sclose, "H5Aget_space(" + what + ")");
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  if (points < 0) throw IoError("H5Sget_simple_extent_npoints(" + what + ") failed: " + detail::hdf5ErrorText());
  const auto count = static_cast<std::size_t>(points);
  auto join = [](const auto& values, auto&& format) {
    std::string text;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i > 0) text += ' ';
      text += format(values[i]);
    }
    return text;
  };
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER: {
      if (H5Tget_sign(type.get()) == H5T_SGN_NONE) {
        std::vector<std::uint64_t> values(count);
        if (count > 0) check(H5Aread(attribute.get(), H5T_NATIVE_UINT64, values.data()), "H5Aread(" + what + ")");
        return join(values, [](std::uint64_t v) { return std::to_string(v); });
      }
      std::vector<std::int64_t> values(count);
      if (count > 0) check(H5Aread(attribute.get(), H5T_NATIVE_INT64, values.data()), "H5Aread(" + what + ")");
      return join(values, [](std::int64_t v) { return std::to_string(v); });
    }
    case H5T_FLOAT: {
      if (H5Tget_size(type.get()) <= sizeof(float)) {  // keep "0.1f" as "0.1", not 0.10000000149011612
        std::vector<float> values(count);
        if (count > 0) check(H5Aread(attribute.get(), H5T_NATIVE_FLOAT, values.data()), "H5Aread(" + what + ")");
        return join(values, [](float v) { return shortestText(v); });
      }
      std::vector<double> values(count);
      if (count > 0) check(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, values.data()), "H5Aread(" + what + ")");
      return join(values, [](double v) { return shortestText(v); });
    }
    case H5T_STRING: {
      if (count != 1) return std::nullopt;
      Handle memType =
          checked(H5Tget_native_type(type.get(), H5T_DIR_ASCEND), H5Tclose, "H5Tget_native_type(" + what + ")");
      const htri_t variable = H5Tis_variable_str(type.get());
      if (variable < 0) throw IoError("H5Tis_variable_str(" + what + ") failed: " + detail::hdf5ErrorText());
      if (variable > 0) {
        char* pointer = nullptr;
        check(H5Aread(attribute.get(), memType.get(), &pointer), "H5Aread(" + what + ")");
        std::string text = pointer != nullptr ? std::string(pointer) : std::string();
        H5free_memory(pointer);
        return text;
      }
      std::string buffer(H5Tget_size(memType.get()), '\0');
      check(H5Aread(attribute.get(), memType.get(), buffer.data()), "H5Aread(" + what + ")");
      buffer.resize(std::min(buffer.size(), buffer.find('\0')));
      if (H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD) {
        buffer.erase(buffer.find_last_not_of(' ') + 1);
      }
      return buffer;
    }
    default:
      return std::nullopt;
  }
}

HeaderInfo readHeader(hid_t file, hsize_t count, bool bodiesElsewhere) {
  HeaderInfo info;
  info.totalBodies = count;
  if (!detail::linkExists(file, "Header", "group /Header")) return info;
  Handle header = checked(H5Gopen2(file, "Header", H5P_DEFAULT), H5Gclose, "H5Gopen2(/Header)");
  const hid_t h = header.get();
  const std::string where = "/Header";
  if (auto time = readNumericAttribute<double>(h, "Time", H5T_NATIVE_DOUBLE, where)) {
    if (time->size() != 1 || !std::isfinite(time->front())) throw InputError("/Header Time is not one finite number");
    info.time = time->front();
  }
  if (auto files = readNumericAttribute<std::int64_t>(h, "NumFilesPerSnapshot", H5T_NATIVE_INT64, where)) {
    if (files->size() != 1 || files->front() < 1 || files->front() > kMaxSnapshotFiles) {
      throw InputError("/Header NumFilesPerSnapshot is not one count from 1 to " + std::to_string(kMaxSnapshotFiles));
    }
    info.numFiles = files->front();
  }
  // A one-file snapshot's totals are this file's counts: a total that differs says rows are missing. A multi-file
  // snapshot's are the set's (readFileSet checks them against the files).
  if (auto total = readNumericAttribute<std::uint64_t>(h, "NumPart_Total", H5T_NATIVE_UINT64, where)) {
    if (total->size() != 6) {
      throw InputError("/Header NumPart_Total has " + std::to_string(total->size()) + " entries, expected 6");
    }
    std::vector<std::uint64_t> high(6, 0);
    if (auto highWord = readNumericAttribute<std::uint64_t>(h, "NumPart_Total_HighWord", H5T_NATIVE_UINT64, where)) {
      if (highWord->size() != 6) {
        throw InputError("/Header NumPart_Total_HighWord has " + std::to_string(highWord->size()) +
                         " entries, expected 6");
      }
      high = *highWord;
    }
    for (std::size_t type = 0; type < 6; ++type) {
      if (high[type] >= (std::uint64_t{1} << 32)) {
        throw InputError("/Header NumPart_Total_HighWord[" + std::to_string(type) + "] is not below 2^32");
      }
      const std::uint64_t bodies = (*total)[type] + (high[type] << 32);
      if (type == 1) info.totalBodies = bodies;
      if (type == 1 && (info.numFiles > 1 || bodiesElsewhere)) continue;
      const std::uint64_t expected = type == 1 ? count : 0;
      if (bodies != expected) {
        throw InputError("/Header NumPart_Total[" + std::to_string(type) + "] (with its high word) is " +
                         std::to_string(bodies) + " but the file holds " + std::to_string(expected) +
                         (type == 1 ? " rows of " + std::string(kGroup) + "/Coordinates" : " of that type") +
                         "; matcha reads whole one-file snapshots only");
      }
    }
  }
  if (auto numPart = readNumericAttribute<std::uint64_t>(h, "NumPart_ThisFile", H5T_NATIVE_UINT64, where)) {
    if (numPart->size() != 6)
      throw InputError("/Header NumPart_ThisFile has " + std::to_string(numPart->size()) + " entries, expected 6");
    for (std::size_t type = 0; type < 6; ++type) {
      if (type != 1 && (*numPart)[type] != 0) {
        throw InputError("/Header NumPart_ThisFile[" + std::to_string(type) +
                         "] = " + std::to_string((*numPart)[type]) + ": the file holds particle type " +
                         std::to_string(type) + ", but matcha reads PartType1 only");
      }
    }
    if ((*numPart)[1] != count) {
      throw InputError("/Header NumPart_ThisFile[1] = " + std::to_string((*numPart)[1]) + " but " + kGroup +
                       "/Coordinates has " + std::to_string(count) + " rows");
    }
  }
  if (auto massTable = readNumericAttribute<double>(h, "MassTable", H5T_NATIVE_DOUBLE, where)) {
    if (massTable->size() != 6)
      throw InputError("/Header MassTable has " + std::to_string(massTable->size()) + " entries, expected 6");
    info.massTable1 = (*massTable)[1];
  }
  for (auto [name, target] :
       {std::pair{"MatchaVersion", &info.matchaVersion}, std::pair{"MatchaGitCommit", &info.matchaGitCommit}}) {
    const htri_t exists = H5Aexists(h, name);
    if (exists < 0) throw IoError(std::string("looking up attribute /Header ") + name + " failed");
    if (exists > 0) *target = attributeText(h, name, where).value_or("");
  }
  double boxSize = 0.0;
  if (auto box = readNumericAttribute<double>(h, "BoxSize", H5T_NATIVE_DOUBLE, where)) {
    if (box->size() != 1 || !std::isfinite(box->front()) || box->front() < 0.0) {
      throw InputError("/Header BoxSize is not one finite number >= 0");
    }
    boxSize = box->front();
  }
  info.storedBoxSize = boxSize;
  bool periodic = info.matchaVersion.empty() && boxSize > 0.0;  // another code's file: GADGET's meaning
  if (auto flag = readNumericAttribute<double>(h, "MatchaPeriodic", H5T_NATIVE_DOUBLE, where)) {
    if (flag->size() != 1 || !(flag->front() == 0.0 || flag->front() == 1.0)) {
      throw InputError("/Header MatchaPeriodic is not 0 or 1");
    }
    periodic = flag->front() == 1.0;
    if (periodic && !(boxSize > 0.0)) throw InputError("/Header MatchaPeriodic is 1 but BoxSize is not > 0");
  }
  info.boxSize = periodic ? boxSize : 0.0;
  CosmologyHeader cosmology;
  for (auto [name, target] :
       {std::pair{"Redshift", &cosmology.redshift}, std::pair{"Omega0", &cosmology.omega0},
        std::pair{"OmegaLambda", &cosmology.omegaLambda}, std::pair{"HubbleParam", &cosmology.hubbleParam}}) {
    if (auto value = readNumericAttribute<double>(h, name, H5T_NATIVE_DOUBLE, where)) {
      if (value->size() != 1 || !std::isfinite(value->front())) {
        throw InputError(std::string("/Header ") + name + " is not one finite number");
      }
      *target = value->front();
    }
  }
  if (cosmology.omega0 > 0.0) info.cosmology = cosmology;
  return info;
}

std::optional<UnitSystem> readUnits(hid_t file) {
  if (!detail::linkExists(file, "Units", "group /Units")) return std::nullopt;
  Handle group = checked(H5Gopen2(file, "Units", H5P_DEFAULT), H5Gclose, "H5Gopen2(/Units)");
  auto positive = [&](const char* name) -> std::optional<double> {
    std::optional<std::vector<double>> value;
    try {
      value = readNumericAttribute<double>(group.get(), name, H5T_NATIVE_DOUBLE, "/Units");
    } catch (const InputError&) {  // not numeric: no unit
      return std::nullopt;
    }
    if (!value || value->size() != 1 || !std::isfinite(value->front()) || !(value->front() > 0.0)) return std::nullopt;
    return value->front();
  };
  const auto length = positive("UnitLength_in_cm");
  const auto mass = positive("UnitMass_in_g");
  const auto velocity = positive("UnitVelocity_in_cm_per_s");
  if (!length || !mass || !velocity) return std::nullopt;
  UnitSystem units;
  units.lengthInCm = *length;
  units.massInGram = *mass;
  units.velocityInCmPerS = *velocity;
  units.gravitationalConstant = positive("GravitationalConstant").value_or(1.0);
  return units;
}

CheckpointState readState(hid_t file, const char* name, const std::optional<RowWindow>& perBody,
                          std::vector<std::string>* perBodyNames) {
  const std::string where = std::string("/Checkpoint/") + name;
  if (!detail::linkExists(file, "Checkpoint", "group /Checkpoint")) {
    throw InputError("there is no /Checkpoint group: the file is a snapshot, not a checkpoint");
  }
  Handle checkpoint = checked(H5Gopen2(file, "Checkpoint", H5P_DEFAULT), H5Gclose, "H5Gopen2(/Checkpoint)");
  if (!detail::linkExists(checkpoint.get(), name, "group " + where))
    throw InputError("there is no " + where + " group");
  Handle group = checked(H5Gopen2(checkpoint.get(), name, H5P_DEFAULT), H5Gclose, "H5Gopen2(" + where + ")");
  const hid_t g = group.get();
  CheckpointState state;
  for (const std::string& key : attributeNames(g)) {
    const auto value = readNumericAttribute<double>(g, key.c_str(), H5T_NATIVE_DOUBLE, where);
    if (!value || value->size() != 1) throw InputError(where + " " + key + " is not one number");
    state.scalars[key] = value->front();
  }
  H5G_info_t info;
  check(H5Gget_info(g, &info), "H5Gget_info(" + where + ")");
  for (hsize_t k = 0; k < info.nlinks; ++k) {
    char key[256];
    const ssize_t length = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, k, key, sizeof key, H5P_DEFAULT);
    if (length < 0 || length >= static_cast<ssize_t>(sizeof key)) throw InputError(where + " has an unreadable name");
    const hid_t id = H5Dopen2(g, key, H5P_DEFAULT);
    if (id < 0) throw InputError(where + "/" + key + " is not a dataset");
    Array array;
    array.dataset = Handle(id, H5Dclose);
    array.name = where + "/" + key;
    Handle type = checked(H5Dget_type(id), H5Tclose, "H5Dget_type(" + array.name + ")");
    Handle space = checked(H5Dget_space(id), H5Sclose, "H5Dget_space(" + array.name + ")");
    if (H5Tget_class(type.get()) != H5T_FLOAT || H5Sget_simple_extent_ndims(space.get()) != 1) {
      throw InputError(array.name + " is not a 1-D array of floating-point numbers");
    }
    check(H5Sget_simple_extent_dims(space.get(), &array.rows, nullptr), "H5Sget_simple_extent_dims");
    hsize_t begin = 0;
    hsize_t count = array.rows;
    if (perBody && array.rows == perBody->rows) {
      begin = perBody->begin;
      count = perBody->count;
      if (perBodyNames != nullptr) perBodyNames->emplace_back(key);
    } else if (perBody && perBody->everyArray) {
      throw InputError(array.name + " has " + std::to_string(array.rows) + " entries, not one per body (" +
                       std::to_string(perBody->rows) + ")");
    }
    auto read = [&](auto& values, hid_t memType) {
      values.resize(count);
      readColumn(array, memType, values.data(), begin, count);
    };
    if (H5Tget_size(type.get()) == sizeof(float)) {
      read(state.floats[key], H5T_NATIVE_FLOAT);
    } else {
      read(state.doubles[key], H5T_NATIVE_DOUBLE);
    }
  }
  return state;
}

Snapshot readBodies(const std::filesystem::path& given, std::uint64_t first, std::optional<std::uint64_t> asked,
                    bool everyFile, const FileVisitor& visit) {
  std::filesystem::path start = firstFileOf(given);
  Handle startFile = openForReading(start);
  // A checkpoint's parts file: the bodies are the multi-file snapshot of its parts, each checked against its header.
  std::optional<HeaderInfo> partsHeader;
  if (const auto folder = checkpointPartsFolder(startFile.get(), start)) {
    partsHeader = readHeader(startFile.get(), 0, true);
    start = partPath(*folder, start, 0);
    startFile = Handle();
  }
  const bool parts = partsHeader.has_value();
  auto openFile = [parts](const std::filesystem::path& file) {
    std::error_code ec;
    if (parts && !std::filesystem::exists(file, ec) && !ec) {
      throw InputError("no such file: the checkpoint's parts folder lacks this part");
    }
    return openSnapshotFile(openForReading(file));
  };
  auto where = [parts](int k, const std::filesystem::path& file) {
    return (parts ? "part " : "file ") + std::to_string(k) + (parts ? " of the checkpoint, " : " of the set, ") +
           quoted(file) + ": ";
  };

  SnapshotFile reference;
  try {
    reference = parts ? openFile(start) : openSnapshotFile(std::move(startFile));
  } catch (...) {
    if (!parts) throw;
    rethrowWithPrefix(where(0, start));
  }
  const HeaderInfo expected = partsHeader.value_or(reference.header);
  Snapshot snapshot = readMetadata(reference);
  std::filesystem::path whole = start;
  int startIndex = 0;
  if (expected.numFiles > 1) {
    std::tie(whole, startIndex) = setNameOf(start);
    if (startIndex >= expected.numFiles) {
      throw InputError("file " + std::to_string(startIndex) + " of a set of " + std::to_string(expected.numFiles) +
                       " files (NumFilesPerSnapshot)");
    }
  }
  const std::string referenceName = parts ? "the parts file's" : "file " + std::to_string(startIndex) + "'s";

  const std::uint64_t total = expected.totalBodies;
  const std::uint64_t count = asked.value_or(total - std::min(first, total));
  if (first > total || count > total - first) {
    throw InputError("bodies " + std::to_string(first) + " to " + std::to_string(first) + " + " +
                     std::to_string(count) + " are asked for, but the snapshot holds " + std::to_string(total));
  }
  const std::uint64_t end = first + count;
  Particles& bodies = snapshot.particles;
  for (std::vector<double>* array : {&bodies.x, &bodies.y, &bodies.z, &bodies.vx, &bodies.vy, &bodies.vz, &bodies.mass,
                                     &bodies.ax, &bodies.ay, &bodies.az, &bodies.pot}) {
    array->reserve(static_cast<std::size_t>(count));
  }
  bodies.id.reserve(static_cast<std::size_t>(count));
  std::uint64_t offset = 0;  // the set's bodies before file k
  int filesRead = 0;
  for (int k = 0; k < expected.numFiles && (everyFile || offset < end); ++k) {
    const std::filesystem::path file = expected.numFiles > 1 ? multiFilePath(whole, k) : start;
    try {
      SnapshotFile opened = k == startIndex ? std::move(reference) : openFile(file);
      if (k != startIndex || parts) requireSameSnapshot(opened.header, expected, referenceName);
      const std::uint64_t rows = opened.coordinates.rows;
      const std::uint64_t lo = std::clamp(first, offset, offset + rows);
      const std::uint64_t hi = std::clamp(end, offset, offset + rows);
      if (hi > lo) {
        appendBodies(bodies, readRows(opened, lo - offset, hi - lo, lo));
        ++filesRead;
      }
      if (visit) visit(opened.file.get(), k, opened.header, rows, lo - offset, hi - lo);
      offset += rows;
    } catch (...) {
      if (expected.numFiles == 1 && !parts) throw;
      rethrowWithPrefix(where(k, file));
    }
  }
  if (everyFile ? offset != total : offset < end) {
    throw InputError("the " + std::to_string(expected.numFiles) + " files hold " + std::to_string(offset) +
                     " bodies but NumPart_Total says " + std::to_string(total));
  }
  if (filesRead > 1) {
    if (const auto repeated = repeatedId(bodies.id)) {
      throw InputError("ParticleID " + std::to_string(*repeated) + " is in two files of the set");
    }
  }
  return snapshot;
}

SnapshotInfo inspectFile(const std::filesystem::path& path) {
  Handle file = openForReading(path);
  SnapshotInfo info;
  HeaderInfo header;
  if (checkpointPartsFolder(file.get(), path)) {
    header = readHeader(file.get(), 0, true);
    info.numBodies = header.totalBodies;
    info.units = readUnits(file.get());
  } else {
    const SnapshotFile opened = openSnapshotFile(std::move(file));
    header = opened.header;
    info.numBodies = header.numFiles > 1 ? header.totalBodies : opened.coordinates.rows;
    info.units = readUnits(opened.file.get());
  }
  info.time = header.time;
  info.boxSize = header.boxSize;
  info.cosmology = header.cosmology;
  return info;
}

}  // namespace detail

void writeSnapshot(const std::filesystem::path& path, const Particles& particles, const SnapshotMetadata& meta,
                   const SnapshotWriteOptions& options) {
  const std::string prefix = "cannot write snapshot " + detail::quoted(path) + ": ";
  if (path.filename().empty()) throw InputError(prefix + "the path names no file");
  try {
    checkWritable(particles, meta, options);
  } catch (...) {
    detail::rethrowWithPrefix(prefix);
  }
  detail::writeAtomically(path, prefix, [&](hid_t file) { writeContents(file, particles, meta, options); });
}

double largestCoordinate(const Particles& particles) {
  double largest = 0.0;
  for (const std::vector<double>* coordinate : {&particles.x, &particles.y, &particles.z}) {
    for (const double value : *coordinate) {
      if (std::isfinite(value)) largest = std::max(largest, std::abs(value));
    }
  }
  return largest;
}

std::filesystem::path multiFilePath(const std::filesystem::path& path, int index) {
  std::filesystem::path part = path;
  part.replace_filename(path.stem().string() + "." + std::to_string(index) + path.extension().string());
  return part;
}

SnapshotInfo inspectSnapshot(const std::filesystem::path& path) {
  const detail::ErrorPrintingOff quiet;
  try {
    return detail::inspectFile(firstFileOf(path));
  } catch (...) {
    detail::rethrowWithPrefix("cannot read snapshot " + detail::quoted(path) + ": ");
  }
}

Snapshot readSnapshot(const std::filesystem::path& path) {
  const detail::ErrorPrintingOff quiet;
  try {
    return detail::readBodies(path, 0, std::nullopt, true);
  } catch (...) {
    detail::rethrowWithPrefix("cannot read snapshot " + detail::quoted(path) + ": ");
  }
}

Snapshot readSnapshotRange(const std::filesystem::path& path, std::uint64_t first, std::uint64_t count) {
  const detail::ErrorPrintingOff quiet;
  try {
    if (count == 0) throw InputError("a range of 0 bodies (from body " + std::to_string(first) + ") reads nothing");
    return detail::readBodies(path, first, count, false);
  } catch (...) {
    detail::rethrowWithPrefix("cannot read snapshot " + detail::quoted(path) + ": ");
  }
}

}  // namespace matcha::io
