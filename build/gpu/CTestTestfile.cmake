# CMake generated Testfile for 
# Source directory: /work/main/gpu
# Build directory: /work/main/build/gpu
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
