# The Debian packages, built by `cpack -G DEB` in a build tree
# (scripts/package.sh configures one for /usr):
#   aggswitch          the switch and its tools, the client library, headers
#                      and pkg-config file, the MPI shim, the systemd unit,
#                      the example /etc/aggswitch/aggswitch.yaml, man pages
#   python3-aggswitch  the Python package (aggswitch, aggswitch.torch,
#                      aggswitch.cache) for Debian's python3
# The shared libraries each links become dependencies through dpkg-shlibdeps;
# the Python package's interpreter and modules are listed below. Paths follow
# CMAKE_INSTALL_PREFIX, so that the unit names the binaries where they are.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME aggswitch)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "aggswitch developers <aggswitch-dev@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "DPDK software switch with in-network aggregation")
set(CPACK_PACKAGE_DESCRIPTION "A userspace L2 switch on DPDK that also sums ML and HPC jobs' gradients \
in the network: each worker sends its vector once and gets the sum back once.")
# Absolute destinations (the example in /etc) go in through DESTDIR.
set(CPACK_SET_DESTDIR ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL switch)
if(AGG_BUILD_PYTHON)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_SWITCH_PACKAGE_NAME aggswitch)
set(CPACK_DEBIAN_SWITCH_PACKAGE_RECOMMENDS "iproute2, ethtool")
set(CPACK_DEBIAN_SWITCH_PACKAGE_SUGGESTS "prometheus, etcd-server")
file(WRITE ${PROJECT_BINARY_DIR}/deb/conffiles "${AGG_CONFIG_DIR}/aggswitch.yaml\n")
set(CPACK_DEBIAN_SWITCH_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/deb/conffiles)
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-aggswitch)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3-numpy, python3-yaml")
set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-torch, python3-mpi4py")
include(CPack)
