// spattn/spattn.hpp - umbrella header of the spattn library.
#pragma once

#include "spattn/attention.hpp"
#include "spattn/backward.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/dist.hpp"
#include "spattn/dist_attention.hpp"
#include "spattn/dist_transport.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/kvcache.hpp"
#include "spattn/pattern.hpp"
#include "spattn/select.hpp"
#include "spattn/tensor.hpp"
