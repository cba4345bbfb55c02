package xds

import (
	"github.com/meshfed/meshfed/xds/ads"
	"github.com/meshfed/meshfed/xds/translate"
)

// The facade's names for what callers use of xds/translate and xds/ads;
// each is documented where it is defined.

// Translation (xds/translate).
type (
	Class       = translate.Class
	Kind        = translate.Kind
	Change      = translate.Change
	Changes     = translate.Changes
	Translator  = translate.Translator
	Skipped     = translate.Skipped
	Invalid     = translate.Invalid
	TrafficNote = translate.TrafficNote
)

const (
	ClassEnvoy   = translate.ClassEnvoy
	ClassGRPC    = translate.ClassGRPC
	ClusterType  = translate.ClusterType
	EndpointType = translate.EndpointType
	ListenerType = translate.ListenerType
	RouteType    = translate.RouteType

	ServiceEntryTypeURL = translate.ServiceEntryTypeURL
	MCPNamespace        = translate.MCPNamespace
	LabelManagedBy      = translate.LabelManagedBy
	LabelRegistries     = translate.LabelRegistries
	LabelRegistryPrefix = translate.LabelRegistryPrefix
	LabelRegistry       = translate.LabelRegistry
	MetadataKey         = translate.MetadataKey
)

var (
	TypeURLs = translate.TypeURLs
	Kinds    = translate.Kinds

	NewTranslator     = translate.NewTranslator
	KindOf            = translate.KindOf
	ClassifyNode      = translate.ClassifyNode
	ClusterName       = translate.ClusterName
	SubsetClusterName = translate.SubsetClusterName
	EnvoyListenerName = translate.EnvoyListenerName
	EnvoyRouteName    = translate.EnvoyRouteName
	GRPCListenerName  = translate.GRPCListenerName
	ShortType         = translate.ShortType
	IsMCPType         = translate.IsMCPType
	MCPTypeURLs       = translate.MCPTypeURLs
)

// Protocol (xds/ads).
type (
	Limits      = ads.Limits
	ProxyStatus = ads.ProxyStatus
	TypeStatus  = ads.TypeStatus
	Nack        = ads.Nack
	// OversizedStatus and OversizedResource: TypeStatus.Oversized.
	OversizedStatus   = ads.OversizedStatus
	OversizedResource = ads.OversizedResource
)

const (
	DefaultMaxTypeURLs = ads.DefaultMaxTypeURLs
	DefaultMaxNames    = ads.DefaultMaxNames
	// DefaultMaxResponseBytes is the gRPC libraries' default receive limit.
	DefaultMaxResponseBytes = ads.DefaultMaxResponseBytes
	MaxNameBytes            = ads.MaxNameBytes
	MaxNackDetail           = ads.MaxNackDetail

	StateSynced  = ads.StateSynced
	StateNotSent = ads.StateNotSent
	StateNacked  = ads.StateNacked
	StateStale   = ads.StateStale
)

var (
	ServerOptions = ads.ServerOptions
	SyncState     = ads.SyncState
	NodeType      = ads.NodeType
)
