# tenax-parquet, the helper program that reads Parquet inputs for `tenax prepare`
# (data/parquet_input.h): built against Apache Arrow's C++ library inside pyarrow's wheel (headers
# and libarrow/libparquet), found through the same Python as libtorch (cmake/TenaxTorch.cmake).
# scripts/setup installs pyarrow for the tests (scripts/python-test-requirements.txt);
# scripts/demo does not, so the demo's build skips the helper and `tenax prepare` of a .parquet
# file says how to get it.
#
# Sets TENAX_PARQUET_FOUND.

set(TENAX_PARQUET_FOUND OFF)
if(TENAX_TORCH_PYTHON)
  execute_process(
    COMMAND "${TENAX_TORCH_PYTHON}" -c [=[
import pyarrow
print(pyarrow.get_include())
print(pyarrow.get_library_dirs()[0])
print(pyarrow.__version__)
]=]
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_rc EQUAL 0)
    string(REPLACE "\n" ";" _out "${_out}")
    list(GET _out 0 _arrow_include)
    list(GET _out 1 _arrow_lib_dir)
    list(GET _out 2 _arrow_version)
    # The wheel carries versioned sonames only (libarrow.so.2600): link those files directly.
    file(GLOB _libarrow "${_arrow_lib_dir}/libarrow.so.[0-9]*")
    file(GLOB _libparquet "${_arrow_lib_dir}/libparquet.so.[0-9]*")
    if(_libarrow AND _libparquet AND EXISTS "${_arrow_include}/parquet/arrow/reader.h")
      list(GET _libarrow 0 _libarrow)
      list(GET _libparquet 0 _libparquet)
      add_executable(tenax-parquet ${CMAKE_SOURCE_DIR}/apps/parquet/tenax_parquet.cc)
      target_include_directories(tenax-parquet SYSTEM PRIVATE "${_arrow_include}")
      target_link_libraries(tenax-parquet PRIVATE "${_libparquet}" "${_libarrow}")
      target_compile_options(tenax-parquet PRIVATE ${TENAX_WARNINGS})
      # Arrow 26's headers use C++20 (std::span, std::popcount, concepts).
      target_compile_features(tenax-parquet PRIVATE cxx_std_20)
      # Found at run time where the wheel has it.
      set_target_properties(tenax-parquet PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}
                            BUILD_RPATH "${_arrow_lib_dir}")
      set(TENAX_PARQUET_FOUND ON)
      message(STATUS "tenax: Parquet inputs through Apache Arrow ${_arrow_version} (${_arrow_lib_dir})")
    endif()
  endif()
endif()
if(NOT TENAX_PARQUET_FOUND)
  message(STATUS "pyarrow not found in the build's Python: tenax-parquet (Parquet inputs) is not built")
endif()
