# SPDX-License-Identifier: Apache-2.0
# CUSCOPE_RUNTIME_LINK: what cuscope::cuscope links for the CUDA runtime, a generator expression
# evaluated for each program that links it (see the top-level CMakeLists.txt for the rules).
#
# A program on the simulated device links cuscope::sim (or, in cuscope's own build, one of its
# variants, cuscope_sim*) among its own libraries: it then gets no runtime from cuscope.

set(_cuscope_rt "$<UPPER_CASE:$<TARGET_PROPERTY:CUDA_RUNTIME_LIBRARY>>")
set(_cuscope_simulated
  "$<BOOL:$<FILTER:$<TARGET_PROPERTY:LINK_LIBRARIES>,INCLUDE,^cuscope(::|_)sim>>")
set(_cuscope_static "$<OR:$<STREQUAL:${_cuscope_rt},>,$<STREQUAL:${_cuscope_rt},STATIC>>")
set(_cuscope_shared "$<STREQUAL:${_cuscope_rt},SHARED>")
set(CUSCOPE_RUNTIME_LINK
  "$<$<AND:$<NOT:${_cuscope_simulated}>,$<NOT:$<LINK_LANGUAGE:CUDA>>>:$<IF:${_cuscope_static},CUDA::cudart_static,$<${_cuscope_shared}:CUDA::cudart>>>")
unset(_cuscope_rt)
unset(_cuscope_simulated)
unset(_cuscope_static)
unset(_cuscope_shared)
