// The switch's control API over HTTP: common/http_server.h serving the
// router of api.h (HandleRequest over a DataSource; the switch's own source
// is SwitchDataSource, switch_source.h), with the server's own refusal
// counts added to every snapshot it renders (/metrics, /api/v1/stats).
//
//   const auto options = ApiServerOptions(cfg.http, *common::LoadOrCreateToken(cfg.http.token_file));
//   ASSIGN_OR_RETURN(auto http, StartApiServer(options, SwitchDataSource(*dataplane, &jobs)));
//   ...
//   http.reset();   // before whatever the source reads is destroyed
//
// Thread safety: as common::HttpServer: StartApiServer on the thread that
// owns the server; the source's functions run on its request threads.
#pragma once

#include <memory>
#include <string>

#include "common/http_server.h"
#include "common/status.h"
#include "config/config.h"
#include "control/api.h"

namespace aggswitch::control {

// The server options of the config's http section, with `token` (the
// token of http.token_file; empty without one). [any]
common::HttpServer::Options ApiServerOptions(const config::HttpConfig& http, std::string token);

// Serves `source` through the router. A bad address or a port in use is an
// error naming the address. [owner]
common::Result<std::unique_ptr<common::HttpServer>> StartApiServer(const common::HttpServer::Options& options,
                                                                   DataSource source);

}  // namespace aggswitch::control
