// PLACEHOLDER: replaced by the HDF5 rank file (io helper).
#include "io/rank_file.h"
#include "core/error.h"
namespace sluice {
std::unique_ptr<RankFile> open_rank_file(const std::string& path, const std::vector<DatasetSpec>&, int64_t, const RankFileMeta&, bool) { SLUICE_THROW("rank file: not built yet: ", path); }
RankFileInfo read_rank_file(const std::string& path) { SLUICE_THROW("rank file: not built yet: ", path); }
void recover_rank_file(const std::string& path) { SLUICE_THROW("rank file: not built yet: ", path); }
void write_virtual_outputs(const std::string& outdir, const std::vector<RankFileInfo>&, int64_t) { SLUICE_THROW("not built yet: ", outdir); }
Coverage check_coverage(const std::vector<RankFileInfo>&, int64_t) { SLUICE_THROW("not built yet"); }
}  // namespace sluice
