# Builds the static library fusec_onnx_proto: the C++ classes protoc generates from onnx-ml.proto.
#
# The .proto comes from the onnx wheel in the project venv (scripts/setup.sh installs
# requirements.txt there), or from -DFUSEC_ONNX_PROTO=<site-packages>/onnx/onnx-ml.proto. Either
# way it must belong to the onnx version requirements.txt pins: the importer's newest accepted IR
# version is the one that file defines, so a different file would silently move the guard.

file(STRINGS ${PROJECT_SOURCE_DIR}/requirements.txt _fusec_onnx_pin REGEX "^onnx==")
string(REGEX REPLACE "^onnx==([^ #]+).*" "\\1" FUSEC_ONNX_PINNED "${_fusec_onnx_pin}")
if(NOT FUSEC_ONNX_PINNED)
  message(FATAL_ERROR "requirements.txt pins no onnx version (a line onnx==X.Y.Z)")
endif()

set(FUSEC_ONNX_PROTO "" CACHE FILEPATH
    "onnx-ml.proto of the pinned onnx package (default: the one in .venv)")
if(FUSEC_ONNX_PROTO)
  set(_fusec_proto ${FUSEC_ONNX_PROTO})
else()
  file(GLOB _fusec_proto ${PROJECT_SOURCE_DIR}/.venv/lib/python3*/site-packages/onnx/onnx-ml.proto)
  list(LENGTH _fusec_proto _fusec_n)
  if(_fusec_n EQUAL 0)
    message(FATAL_ERROR "fusec: no onnx-ml.proto in .venv: run scripts/setup.sh (it creates .venv from "
                        "requirements.txt), or pass -DFUSEC_ONNX_PROTO=<site-packages>/onnx/onnx-ml.proto "
                        "from onnx ${FUSEC_ONNX_PINNED}")
  endif()
  list(GET _fusec_proto 0 _fusec_proto)
endif()
if(NOT EXISTS ${_fusec_proto})
  message(FATAL_ERROR "fusec: FUSEC_ONNX_PROTO=${_fusec_proto} does not exist")
endif()
get_filename_component(_fusec_onnx_dir ${_fusec_proto} DIRECTORY)   # .../site-packages/onnx
get_filename_component(_fusec_site ${_fusec_onnx_dir} DIRECTORY)    # .../site-packages
if(NOT EXISTS ${_fusec_site}/onnx-${FUSEC_ONNX_PINNED}.dist-info)
  file(GLOB _fusec_found LIST_DIRECTORIES true ${_fusec_site}/onnx-*.dist-info)
  message(FATAL_ERROR "fusec: ${_fusec_proto} is not from onnx ${FUSEC_ONNX_PINNED}, the version "
                      "requirements.txt pins (found: ${_fusec_found}); re-run scripts/setup.sh")
endif()

set(_fusec_gen ${PROJECT_BINARY_DIR}/gen)
add_custom_command(
  OUTPUT ${_fusec_gen}/onnx/onnx-ml.pb.cc ${_fusec_gen}/onnx/onnx-ml.pb.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${_fusec_gen}
  COMMAND ${Protobuf_PROTOC_EXECUTABLE} --proto_path=${_fusec_site} --cpp_out=${_fusec_gen} ${_fusec_proto}
  DEPENDS ${_fusec_proto} ${PROJECT_SOURCE_DIR}/requirements.txt
  COMMENT "Generating the ONNX protobuf classes from onnx ${FUSEC_ONNX_PINNED}'s onnx-ml.proto"
  VERBATIM)
add_library(fusec_onnx_proto STATIC ${_fusec_gen}/onnx/onnx-ml.pb.cc)
# BEFORE: an installed libonnx-dev has a header of the same name in /usr/include/onnx.
target_include_directories(fusec_onnx_proto BEFORE PUBLIC ${_fusec_gen})
target_link_libraries(fusec_onnx_proto PUBLIC protobuf::libprotobuf)
target_compile_definitions(fusec_onnx_proto PUBLIC FUSEC_ONNX_VERSION="${FUSEC_ONNX_PINNED}")
set_target_properties(fusec_onnx_proto PROPERTIES POSITION_INDEPENDENT_CODE ON)
message(STATUS "fusec: ONNX protobuf classes from ${_fusec_proto} (onnx ${FUSEC_ONNX_PINNED})")
