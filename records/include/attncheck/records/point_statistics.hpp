#pragma once
// What a point record derives from its own moments: the confidence intervals, the z against a closed form, the
// Jensen ratios, the reported standard error and the spread of the variance. The sweep computes them here when it
// writes a record, and every reader recomputes them here from the record's mean, mean_sq, standard errors and
// sample count, so that a record changed after it was written (a mean set to 1e308 by hand, a CI or a z edited)
// is refused naming its field instead of being reported or resumed beside values it no longer gives.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace attncheck::records {

struct PointRecord;

// Two-sided Student-t quantile t_{dof, (1 + level)/2} (Boost.Math); dof may be fractional, <= 0 means normal.
double student_t_quantile(double dof, double level);

// The 95% Student-t interval mean -+ t_{samples - 1} se; (-inf, inf) for fewer than 2 samples.
std::pair<double, double> ci95_of(double mean, double se, std::uint64_t samples);

// (estimate - exact) / se, with se no smaller than the rounding of the per-sample sums (1e-12 of the value): a
// quantity that does not vary between samples (||dS|| of a linear map, |s| = sqrt(2) under qk-layernorm at d = 2)
// has a standard error of rounding noise, not of sampling.
std::optional<double> z_score(double estimate, double se, double exact);

// Why `record` is not what attncheck writes, in words naming the fields, or nothing where every field follows
// from its moments and sample count (to 1e-9 relative: the JSON form of a double is exact, the rest is the
// rounding of the recomputation). `versioned`: the line carries "format_version" (3 on), so it was written with
// every field below and with the formulas here; lines of earlier writers are held only to what every version
// wrote (a null mean with a null CI, a CI centred on the mean and about 1.96 standard errors wide, z and Jensen
// ratios from their moments).
std::optional<std::string> point_record_inconsistency(const PointRecord& record, bool versioned);

}  // namespace attncheck::records
