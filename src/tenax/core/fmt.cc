// The compiled part of {fmt} (third_party/fmt, 9.1), built once here for the whole tree instead of
// in every translation unit (FMT_HEADER_ONLY): that alone took a third of the compile time of a
// typical torch-free file. format-inl.h defines fmt's out-of-line functions; the explicit
// instantiations are the ones format.h declares `extern template` when not header-only.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
}  // namespace detail
FMT_END_NAMESPACE
